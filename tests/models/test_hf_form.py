"""A decoder config whose family's Hugging Face form cannot hold it is refused before training and before
saving (transformers would read the directory as another model); one it can hold, however spelled, passes."""

import pytest

from fuzz.oracle import run_cli
from lmlab.errors import LmlabError
from lmlab.models.decoder_files import check_hf_form
from lmlab.models.presets import preset


@pytest.mark.parametrize("name, changes, flag", [
    ("qwen3-tiny", dict(qkv_bias=True), "--qkv-bias True"),
    ("llama-tiny", dict(qk_norm="head"), "--qk-norm head"),
    ("olmo2-tiny", dict(norm_placement="pre"), "--norm-placement pre"),
    ("gpt2-tiny", dict(norm="rmsnorm"), "--norm rmsnorm"),
    ("mistral-tiny", dict(global_every=2), "--sliding-window"),
])
def test_a_setting_the_hf_form_lacks_is_refused(name, changes, flag):
    with pytest.raises(LmlabError, match=flag.replace("-", "\\-")):
        check_hf_form(preset(name, **changes))


@pytest.mark.parametrize("name, changes", [
    ("llama-tiny", dict(head_size=32)),  # the same as d_model / n_heads
    ("llama-tiny", dict(n_kv_heads=None, attention="lsh")),  # lmlab's own settings stay in the "lmlab" section
    ("gemma3-tiny", dict(n_layers=3)),  # no global layer left: each layer's window is what counts
    ("qwen2-tiny", dict(rope_scaling="yarn", rope_factor=4.0, rope_original_context=64)),
])
def test_a_setting_the_hf_form_holds_passes(name, changes):
    check_hf_form(preset(name, **changes))


def test_lmlab_train_refuses_before_training(tmp_path):
    run = run_cli(["train", "--model", "qwen3-tiny", "--qkv-bias", "--data", "markov", "--out", str(tmp_path / "run"),
                   "--max-steps", "2"])
    assert run.code == 2 and "--qkv-bias True" in run.err and len(run.err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()

"""Qwen3, OLMo 2 and Phi-3 beyond the shared parity tests (tests/models/test_parity_families.py): the
config.json of each published model reads as its preset, a directory transformers itself saved loads with
its logits, each key lmlab does not compute is refused in one line, and the tiny presets train and are listed."""

import pytest
import torch

import lmlab
from conftest import lmlab as run_cli
from hf_models import FAMILY_PRESET, FAMILY_TINY, hf_model
from lmlab.errors import LmlabError
from lmlab.models.decoder_files import load_hf_dir
from lmlab.models.registry import family

pytestmark = pytest.mark.usefixtures("one_thread")

# The computation keys of the published config.json files (Qwen/Qwen3-0.6B, allenai/OLMo-2-0425-1B,
# microsoft/Phi-3-mini-4k-instruct), with the preset each one is.
PUBLISHED = {
    "qwen3-0.6b": dict(
        model_type="qwen3", architectures=["Qwen3ForCausalLM"], attention_bias=False, head_dim=128, hidden_act="silu",
        hidden_size=1024, intermediate_size=3072, max_position_embeddings=40960, max_window_layers=28,
        num_attention_heads=16, num_hidden_layers=28, num_key_value_heads=8, rms_norm_eps=1e-6, rope_scaling=None,
        rope_theta=1000000, sliding_window=None, tie_word_embeddings=True, use_sliding_window=False,
        vocab_size=151936),
    "olmo-2-1b": dict(
        model_type="olmo2", architectures=["Olmo2ForCausalLM"], attention_bias=False, hidden_act="silu",
        hidden_size=2048, intermediate_size=8192, max_position_embeddings=4096, num_attention_heads=16,
        num_hidden_layers=16, num_key_value_heads=16, rms_norm_eps=1e-6, rope_scaling=None, rope_theta=500000,
        tie_word_embeddings=False, vocab_size=100352),
    "phi-3-mini-4k": dict(
        model_type="phi3", architectures=["Phi3ForCausalLM"], attention_bias=False, embd_pdrop=0.0, hidden_act="silu",
        hidden_size=3072, intermediate_size=8192, max_position_embeddings=4096, num_attention_heads=32,
        num_hidden_layers=32, num_key_value_heads=32, original_max_position_embeddings=4096, resid_pdrop=0.0,
        rms_norm_eps=1e-5, rope_scaling=None, rope_theta=10000.0, sliding_window=2047, tie_word_embeddings=False,
        vocab_size=32064),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_a_published_config_reads_as_its_preset(name):
    hf = PUBLISHED[name]
    assert family(hf["model_type"]).config_from_hf(hf) == lmlab.preset(name)


def test_qwen3_reads_the_yarn_scaling_its_model_cards_suggest():
    hf = PUBLISHED["qwen3-0.6b"] | dict(rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 32768})
    assert family("qwen3").config_from_hf(hf) == lmlab.preset("qwen3-0.6b", rope_scaling="yarn", rope_factor=4.0,
                                                              rope_original_context=32768)


@pytest.mark.parity
@pytest.mark.parametrize("name", ["qwen3", "olmo2-tied-mha", "phi3"])
def test_a_directory_transformers_saved_loads_with_its_logits(name, tmp_path):
    # transformers 5 writes its own keys: rope_parameters (with Phi-3's partial_rotary_factor), layer_types, …
    cfg = lmlab.preset(FAMILY_PRESET[name], **FAMILY_TINY[name])
    reference = hf_model(cfg)
    reference.save_pretrained(tmp_path)
    ours = load_hf_dir(tmp_path)
    assert ours.config == cfg
    ids = torch.randint(0, cfg.vocab_size, (2, 20), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (ours(ids) - reference(ids).logits).abs().max().item() <= 1e-4


REFUSED = {
    "qwen3 attention_bias": ("qwen3-0.6b", dict(attention_bias=True), "attention_bias=True"),
    "qwen3 window": ("qwen3-0.6b", dict(use_sliding_window=True), "use_sliding_window=True"),
    "qwen3 layer_types": ("qwen3-0.6b", dict(layer_types=["full_attention", "sliding_attention"]),
                          "layer_types=.*full attention on every layer"),
    "qwen3 hidden_act": ("qwen3-0.6b", dict(hidden_act="gelu"), "hidden_act='gelu'"),
    "olmo2 clip_qkv": ("olmo-2-1b", dict(clip_qkv=8.0), "clip_qkv=8.0"),
    "olmo2 attention_bias": ("olmo-2-1b", dict(attention_bias=True), "attention_bias=True"),
    "olmo2 rope": ("olmo-2-1b", dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "RoPE scaling 'dynamic'"),
    "phi3 partial rotary": ("phi-3-mini-4k", dict(partial_rotary_factor=0.75), "partial_rotary_factor=0.75"),
    "phi3 partial rotary in rope_parameters": (
        "phi-3-mini-4k", dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}),
        "partial_rotary_factor=0.5"),
    "phi3 su": ("phi-3-mini-4k", dict(rope_scaling={"type": "su", "short_factor": [1.0], "long_factor": [2.0]}),
                "RoPE scaling 'su' is not supported for phi3.*LongRoPE"),
    "phi3 longrope": ("phi-3-mini-4k", dict(rope_scaling={"rope_type": "longrope", "short_factor": [1.0]}),
                      "RoPE scaling 'longrope'"),
    "phi3 yarn": ("phi-3-mini-4k", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}),
                  "RoPE scaling 'yarn'"),
    "phi3 hidden_act": ("phi-3-mini-4k", dict(hidden_act="gelu_new"), "hidden_act='gelu_new'"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_key_lmlab_does_not_compute_is_refused_in_one_line(case):
    name, changes, message = REFUSED[case]
    hf = PUBLISHED[name] | changes
    convert = family(hf["model_type"])
    for read in (convert.config_from_hf, convert.check_hf_keys):  # a directory with or without an "lmlab" section
        with pytest.raises(LmlabError, match=message) as refused:
            read(hf)
        assert "\n" not in str(refused.value)


def test_a_tiny_preset_trains_and_loads_back(tmp_path, tiny_train):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat.\nthe dog sat on the log.\na bird sang in the tree.\n" * 20)
    train_cfg = tiny_train.replace(loop=tiny_train.loop.replace(max_steps=2, eval_every=2, checkpoint_every=2))
    for name in ("qwen3-tiny", "olmo2-tiny", "phi3-tiny"):
        cfg = lmlab.preset(name, vocab_size=280, context_length=32, n_layers=1, d_model=32, d_ff=48)
        result = lmlab.train(cfg, train_cfg, str(text), tmp_path / name, show_progress=False)
        model, _ = lmlab.load(result.model_dir)
        assert model.config == cfg.replace(vocab_size=model.config.vocab_size, trained_context=train_cfg.block_size)


def test_lmlab_list_shows_each_family_with_its_presets(capsys):
    assert run_cli("list", "--families") == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["qwen3"][:3] == ["qwen3", "decoder", "qwen3"] and rows["qwen3"][-2:] == ["qwen3-tiny,", "qwen3-0.6b"]
    assert rows["olmo2"][:3] == ["olmo2", "decoder", "olmo2"] and rows["olmo2"][-2:] == ["olmo2-tiny,", "olmo-2-1b"]
    assert rows["phi3"][:3] == ["phi3", "decoder", "phi3"] and rows["phi3"][-2:] == ["phi3-tiny,", "phi-3-mini-4k"]

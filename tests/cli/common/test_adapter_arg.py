"""`--adapter DIR` on the commands that load a decoder: an adapter peft wrote (save_pretrained) applies to
--model with the library's outputs; an adapter of another base, or on quantized weights, is one line."""

import json
import warnings

import pytest
import torch

from chat_models import TINY_FLAGS, tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.cli.eval.perplexity import window_length
from lmlab.eval.perplexity import perplexity
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.models.load import load
from lmlab.models.peft_files import base_fingerprint, load_peft, save_peft
from lmlab.modules.peft import apply_lora

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = "the cat"


@pytest.fixture(scope="module")
def peft_adapter(decoder_dir, tmp_path_factory):
    """A LoRA on c_attn and mlp.c_fc of the tiny GPT-2, written by peft's own save_pretrained."""
    reference = transformers.AutoModelForCausalLM.from_pretrained(decoder_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuned = peft.get_peft_model(reference, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn", "c_fc"],
                                                               fan_in_fan_out=True))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in tuned.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator))
    directory = tmp_path_factory.mktemp("adapters") / "peft"
    tuned.save_pretrained(directory)
    return directory


def test_generate_applies_an_adapter_peft_wrote(decoder_dir, peft_adapter, capsys):
    model, tokenizer = load(decoder_dir)
    model = load_peft(model, peft_adapter).eval()
    config = GenerationConfig(max_new_tokens=8, temperature=0.0, eos_id=tokenizer.stop_ids)
    expected = generate_batch(model, [tokenizer.encode(PROMPT)], config, tokenizer)[0].token_ids
    assert lmlab("generate", "--model", decoder_dir, "--adapter", peft_adapter, "--prompt", PROMPT, "--greedy",
                 "--max-new-tokens", 8, "--json") == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == expected


def test_eval_perplexity_scores_with_the_adapter(decoder_dir, peft_adapter, tmp_path, capsys):
    (tmp_path / "t.txt").write_text("the cat sat on the mat and the dog sat on the log\n")
    model, tokenizer = load(decoder_dir)
    model = load_peft(model, peft_adapter).eval()
    ids = torch.tensor(tokenizer.encode((tmp_path / "t.txt").read_text()))
    expected = perplexity(model, ids, window_length(model.config, None)).perplexity
    assert lmlab("eval", "perplexity", "--model", decoder_dir, "--adapter", peft_adapter, "--data",
                 tmp_path / "t.txt", "--json") == 0
    assert json.loads(capsys.readouterr().out)["perplexity"] == pytest.approx(expected, rel=1e-5)


def test_load_takes_the_adapter_as_load_peft_applies_it(decoder_dir, peft_adapter):
    model, tokenizer = load(decoder_dir, adapter=peft_adapter)
    reference = load_peft(load(decoder_dir)[0], peft_adapter).eval()
    ids = torch.tensor([tokenizer.encode(PROMPT)])
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference(ids), rtol=0, atol=0)
        assert not torch.allclose(model(ids), load(decoder_dir)[0].eval()(ids))  # the adapter moves the logits


def test_eval_harness_scores_with_the_adapter(decoder_dir, peft_adapter, capsys):
    pytest.importorskip("lm_eval")
    results = {}
    for adapter in ((), ("--adapter", peft_adapter)):
        assert lmlab("eval", "harness", "--model", decoder_dir, *adapter, "--tasks", "lmlab_text", "--include-path",
                     "tests/data/harness", "--trust-task-code", "--limit", 2, "--json") == 0
        results[bool(adapter)] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert results[True]["lmlab_text"] != results[False]["lmlab_text"], results  # the adapter moves the scores


def test_an_adapter_of_another_base_or_on_quantized_weights_is_one_line(decoder_dir, peft_adapter, tmp_path,
                                                                        capsys):
    other, _ = load(decoder_dir)
    with torch.no_grad():
        other.norm.weight.add_(1.0)
    fingerprint = base_fingerprint(other)
    save_peft(apply_lora(other, rank=2), tmp_path / "other", "lora", {}, fingerprint)
    assert lmlab("generate", "--model", decoder_dir, "--adapter", tmp_path / "other", "--prompt", PROMPT) == 2
    one_line_error(capsys, f"was trained on base model {fingerprint}, not gpt2-2x32-")
    assert lmlab("chat", "--model", decoder_dir, "--adapter", peft_adapter, "--dtype", "int8", "--prompt", "hi") == 2
    one_line_error(capsys, "--adapter applies to a float model's linear layers, not to int8 weights")


def test_sft_starts_from_an_adapter_peft_wrote(tmp_path, capsys):
    base = tiny_chat_model(tmp_path / "base")
    reference = transformers.AutoModelForCausalLM.from_pretrained(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft.get_peft_model(reference, peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"])
                            ).save_pretrained(tmp_path / "peft")
    assert lmlab("sft", "--model", base, "--adapter", tmp_path / "peft", "--data", "task", "--out", tmp_path / "r",
                 *TINY_FLAGS) == 0
    settings = json.loads((tmp_path / "r" / "run.json").read_text())
    assert settings["peft_method"] == "lora" and settings["peft_settings"]["rank"] == 4  # q and v stacked on qkv
    assert json.loads((tmp_path / "r" / "adapter" / "adapter_config.json").read_text())["peft_type"] == "LORA"

"""Adapters in Hugging Face peft's layout, both ways: what lmlab writes, `peft.PeftModel.from_pretrained`
loads with the same logits; what peft writes, lmlab loads with the same logits; lmlab's older files
still load; an adapter of another base, or one lmlab cannot compute, is refused in one line."""

import json
import warnings

import pytest
import torch

from hf_models import PRESET, TINY, hf_model
from lmlab.errors import LmlabError
from lmlab.models import peft_lora
from lmlab.models.decoder import build_decoder
from lmlab.models.peft_files import base_fingerprint, load_peft, save_peft
from lmlab.models.presets import preset
from lmlab.models.registry import family
from lmlab.modules.peft import (
    LoRALinear,
    applied_method,
    apply_lora,
    apply_peft,
    apply_prefix,
    apply_prompt_tuning,
)

peft = pytest.importorskip("peft")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]

TARGETS = {"gpt2": ["qkv", "out", "up", "down", "lm_head"], "llama": ["qkv", "out", "gate_up", "down", "lm_head"]}
x = torch.randint(97, (2, 9), generator=torch.Generator().manual_seed(0))


def pair(name: str):
    """(lmlab decoder, transformers model) with the same random weights: TINY[name]'s shape."""
    cfg = preset(PRESET[name], **TINY[name])
    reference = hf_model(cfg)
    ours = build_decoder(cfg).eval()
    ours.load_state_dict(family(cfg.family).from_hf(reference.state_dict(), cfg))
    return ours, reference


def randomise(model: torch.nn.Module, seed: int = 1) -> None:
    """Every LoRA B (zero when applied) random, so the adapter changes the outputs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("lora_b", "lora_B.default.weight")):
                p.copy_(torch.randn(p.shape, generator=generator) * 0.2)


def peft_logits(reference, directory) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fan_in_fan_out on GPT-2's lm_head, a tied lm_head adapted
        return peft.PeftModel.from_pretrained(reference, str(directory)).eval()(x).logits


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_lora_written_by_lmlab_loads_in_peft_with_the_same_logits(name, tmp_path):
    ours, reference = pair(name)
    fingerprint = base_fingerprint(ours)
    apply_lora(ours, rank=3, alpha=5.0, targets=TARGETS[name])
    randomise(ours)
    save_peft(ours, tmp_path / "a", "lora", {}, fingerprint, "tiny-base")
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"], config["bias"]) == ("LORA", 3, 5.0, "none")
    assert config["base_model_name_or_path"] == "tiny-base"
    save_peft(ours, tmp_path / "z", "lora", {}, fingerprint, "smollm2-135m-instruct-hf")  # a zoo name: its hub repo
    config = json.loads((tmp_path / "z" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert json.loads((tmp_path / "a" / "lmlab_adapter.json").read_text())["base_model"] == fingerprint
    assert (peft_logits(reference, tmp_path / "a") - ours(x)).abs().max() < 1e-4


def test_llama_lora_keys_are_peft_names_on_hf_modules(tmp_path):
    ours, _ = pair("llama")
    apply_lora(ours, rank=2, targets=["blocks.1.attention.qkv", "down"])
    save_peft(ours, tmp_path / "a", "lora", {}, base_fingerprint(ours))
    from safetensors.torch import load_file
    keys = set(load_file(tmp_path / "a" / "adapter_model.safetensors"))
    assert "base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight" in keys
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" not in keys
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert config["target_modules"] == ["down_proj", "layers.1.self_attn.k_proj", "layers.1.self_attn.q_proj",
                                        "layers.1.self_attn.v_proj"]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_lora_written_by_peft_loads_in_lmlab_with_the_same_logits(name, tmp_path):
    ours, reference = pair(name)
    modules = {"gpt2": ["c_attn", "attn.c_proj"], "llama": ["q_proj", "v_proj", "o_proj", "up_proj"]}[name]
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=modules, rank_pattern={"o_proj": 2},
                             alpha_pattern={"v_proj": 3.0}, fan_in_fan_out=name == "gpt2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuned = peft.get_peft_model(reference, config).eval()
    randomise(tuned)
    tuned.save_pretrained(tmp_path / "p")
    expected = tuned(x).logits
    loaded = load_peft(ours, tmp_path / "p")
    assert (loaded(x) - expected).abs().max() < 1e-4
    assert applied_method(loaded)[0] == "lora"


def test_round_trip_lmlab_to_peft_to_lmlab_keeps_the_fused_rank(tmp_path):
    ours, _ = pair("llama")
    fingerprint = base_fingerprint(ours)
    apply_lora(ours, rank=3, targets=TARGETS["llama"])
    randomise(ours)
    save_peft(ours, tmp_path / "a", "lora", {}, fingerprint)
    again = load_peft(pair("llama")[0], tmp_path / "a")
    assert torch.equal(again(x), ours(x))
    assert {m.rank for m in again.modules() if isinstance(m, LoRALinear)} == {3}


def test_an_adapter_in_lmlabs_older_files_still_loads(tmp_path):
    ours, _ = pair("llama")
    fingerprint = base_fingerprint(ours)
    apply_peft(ours, "lora", rank=2, targets=["qkv"])
    randomise(ours)
    save_peft(ours, tmp_path / "old", "lora", {"rank": 2, "targets": ["qkv"]}, fingerprint, peft_format=False)
    assert {p.name for p in (tmp_path / "old").iterdir()} == {".lmlab", "peft.json", "peft.safetensors"}
    assert torch.equal(load_peft(pair("llama")[0], tmp_path / "old")(x), ours(x))


def test_prompt_tuning_maps_to_peft_on_rope_and_stays_lmlabs_on_gpt2(tmp_path):
    ours, reference = pair("llama")
    fingerprint = base_fingerprint(ours)
    apply_prompt_tuning(ours, 4)
    save_peft(ours, tmp_path / "p", "prompt", {"n_tokens": 4}, fingerprint)
    assert json.loads((tmp_path / "p" / "adapter_config.json").read_text())["peft_type"] == "PROMPT_TUNING"
    assert (peft_logits(reference, tmp_path / "p")[:, 4:] - ours(x)).abs().max() < 1e-4
    assert torch.allclose(load_peft(pair("llama")[0], tmp_path / "p")(x), ours(x), atol=1e-5)
    gpt2, _ = pair("gpt2")
    apply_prompt_tuning(gpt2, 4)
    with pytest.raises(LmlabError, match="cannot write the adapter in peft's format: with learned positions"):
        save_peft(gpt2, tmp_path / "g", "prompt", {}, base_fingerprint(gpt2), peft_format=True)
    assert not (tmp_path / "g").exists()
    save_peft(gpt2, tmp_path / "g", "prompt", {"n_tokens": 4}, base_fingerprint(gpt2))
    assert (tmp_path / "g" / "peft.json").is_file()


@pytest.mark.parametrize("name", ["llama", "llama-tied-mqa"])
def test_prefix_tuning_maps_to_peft_both_ways_on_rope(name, tmp_path):
    ours, reference = pair(name)
    fingerprint = base_fingerprint(ours)
    apply_prefix(ours, 3)
    save_peft(ours, tmp_path / "p", "prefix", {"n_prefix": 3}, fingerprint)
    assert json.loads((tmp_path / "p" / "adapter_config.json").read_text())["peft_type"] == "PREFIX_TUNING"
    assert (peft_logits(reference, tmp_path / "p") - ours(x)).abs().max() < 1e-4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuned = peft.get_peft_model(pair(name)[1], peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=5)).eval()
    with torch.no_grad():
        tuned.prompt_encoder.default.embedding.weight.normal_()
    tuned.save_pretrained(tmp_path / "q")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft passes the prefix as past_key_values, which transformers renames
        expected = tuned(x).logits
    assert (load_peft(pair(name)[0], tmp_path / "q")(x) - expected).abs().max() < 1e-4
    gpt2, _ = pair("gpt2")
    with pytest.raises(LmlabError, match="cannot write the adapter in peft's format: with learned positions"):
        save_peft(apply_prefix(gpt2, 3), tmp_path / "g", "prefix", {}, base_fingerprint(gpt2), peft_format=True)


def test_another_base_is_refused_in_one_line(tmp_path):
    ours, _ = pair("llama")
    apply_lora(ours, rank=2)
    save_peft(ours, tmp_path / "a", "lora", {}, base_fingerprint(pair("llama")[0]))
    other = pair("llama")[0]
    with torch.no_grad():
        other.norm.weight.add_(1.0)
    with pytest.raises(LmlabError, match=r"trained on base model llama-2x32-\w+, not llama-2x32-\w+; load it onto"):
        load_peft(other, tmp_path / "a")
    (tmp_path / "a" / "lmlab_adapter.json").unlink()  # as peft writes it: checked by names and shapes
    with pytest.raises(LmlabError, match="k_proj's lora_A/lora_B are .* this base model needs"):
        load_peft(pair("llama-tied-mqa")[0], tmp_path / "a")
    with pytest.raises(LmlabError, match="targets 'k_proj', which is no linear layer of this base model"):
        load_peft(pair("gpt2")[0], tmp_path / "a")


def test_settings_lmlabs_lora_does_not_compute_are_refused_in_one_line(tmp_path):
    ours, reference = pair("llama")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft.get_peft_model(reference, peft.LoraConfig(r=2, target_modules=["q_proj"], bias="all")
                            ).save_pretrained(tmp_path / "b")
    with pytest.raises(LmlabError, match="sets bias='all', which lmlab's LoRA does not train"):
        load_peft(ours, tmp_path / "b")


def test_a_lora_layer_with_no_hf_module_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    ours, _ = pair("gpt2")
    apply_lora(ours, rank=2, targets=["qkv"])
    monkeypatch.setattr(peft_lora, "hf_parts", lambda model, layers: {name: [] for name in layers})
    with pytest.raises(LmlabError, match="LoRA on blocks.0.attention.qkv has no module PEFT can adapt"):
        save_peft(ours, tmp_path / "a", "lora", {}, base_fingerprint(ours))
    assert not (tmp_path / "a").exists()

"""PEFT: every method starts from (or switches back to) the base model, trains only what it adds,
saves and loads only that, and works with padding and cached decoding."""

import copy

import pytest
import torch
import torch.nn.functional as F

from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig, generate, generate_batch
from lmlab.models.decoder import build_decoder
from lmlab.models.peft_files import base_fingerprint, load_peft, save_peft
from lmlab.models.presets import preset
from lmlab.modules.peft import (
    LoRALinear,
    adapters_disabled,
    apply_lora,
    apply_peft,
    apply_prompt_tuning,
    count_parameters,
    describe,
    merge_lora,
    peft_parameters,
    trainable_parameters,
    unmerge_lora,
)

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILIES = ["gpt2-tiny", "llama-tiny"]  # learned positions + MHA; RoPE + grouped-query + SwiGLU
METHODS = ["lora", "adapter", "prefix", "prompt"]
SETTINGS = {"lora": {"rank": 4, "targets": ["qkv", "out", "down"]}, "adapter": {"bottleneck": 8},
            "prefix": {"n_prefix": 3}, "prompt": {"n_tokens": 4}}
x = torch.randint(50, (2, 9), generator=torch.Generator().manual_seed(0))


def base_model(family: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    shape = dict(vocab_size=50, n_layers=2, context_length=32, n_heads=4, d_model=32, d_ff=64)
    return build_decoder(preset(family, **shape)).eval()


def peft_model(family: str, method: str, seed: int = 0) -> torch.nn.Module:
    """A base model with `method` applied and its added parameters moved away from their start."""
    return perturb(apply_peft(base_model(family, seed), method, **SETTINGS[method]))


@torch.no_grad()
def perturb(model: torch.nn.Module) -> torch.nn.Module:
    """Move every PEFT parameter off its start (LoRA's B and the adapters' up are zero there)."""
    for p in peft_parameters(model).values():
        p.add_(0.1 * torch.randn_like(p))
    return model


def uncached_greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("method", METHODS)
def test_fresh_lora_and_adapters_and_any_method_switched_off_compute_exactly_the_base_model(family, method):
    base = base_model(family)(x)
    model = apply_peft(base_model(family), method, **SETTINGS[method])
    if method in ("lora", "adapter"):  # B = 0, up = 0: the identity until trained
        assert torch.equal(model(x), base)
    tuned = perturb(model)(x)
    assert not torch.allclose(tuned, base)
    with adapters_disabled(model):
        assert torch.equal(model(x), base)
    assert torch.equal(model(x), tuned)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("method", METHODS)
def test_only_peft_parameters_train_and_training_lowers_the_loss(family, method):
    model = apply_peft(base_model(family), method, **SETTINGS[method]).train()
    added = set(peft_parameters(model))
    assert added and {id(p) for p in trainable_parameters(model)} == {id(p) for p in peft_parameters(model).values()}
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.Adam(trainable_parameters(model), lr=1e-2)

    def loss() -> torch.Tensor:
        return F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())

    first = loss().item()
    for _ in range(5):
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()
    assert loss().item() < first
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]) == (name not in added), name


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_merged_equals_unmerged_and_unmerge_restores_the_weights(family):
    model = peft_model(family, "lora")
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    unmerged = model(x)
    merge_lora(model)
    assert all(m.merged for m in model.modules() if isinstance(m, LoRALinear))
    torch.testing.assert_close(model(x), unmerged, atol=1e-5, rtol=0)
    with adapters_disabled(model):  # merged and off: the update comes back out
        torch.testing.assert_close(model(x), base_model(family)(x), atol=1e-5, rtol=0)
    merge_lora(model)  # merging twice does not fold the update in twice
    torch.testing.assert_close(model(x), unmerged, atol=1e-5, rtol=0)
    unmerge_lora(model)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p, weights[name], atol=1e-6, rtol=0)


def test_lora_keeps_base_weight_names_and_merging_a_tied_head_is_refused():
    model = base_model("gpt2-tiny")
    base_names = set(model.state_dict())
    apply_lora(model, targets=["qkv", "lm_head"])
    assert base_names <= set(model.state_dict())
    assert model.lm_head.weight is model.token_embedding.weight
    with pytest.raises(LmlabError, match="lm_head.*tied to token_embedding.weight"):
        merge_lora(model)


@pytest.mark.parametrize("method", METHODS)
def test_save_then_load_onto_a_fresh_base_reproduces_the_outputs(method, tmp_path):
    model = peft_model("llama-tiny", method)
    save_peft(model, tmp_path / "adapter", method, SETTINGS[method], base_fingerprint(base_model("llama-tiny")))
    files = sorted(p.name for p in (tmp_path / "adapter").iterdir())
    peft_layout = [".lmlab", "adapter_config.json", "adapter_model.safetensors", "lmlab_adapter.json"]
    assert files == (peft_layout if method in ("lora", "prompt", "prefix") else [".lmlab", "peft.json", "peft.safetensors"])
    loaded = load_peft(base_model("llama-tiny"), tmp_path / "adapter")
    if method == "prefix":  # peft's keys are lmlab's rotated by P, and back on loading: equal to rounding
        assert torch.allclose(loaded(x), model(x), atol=1e-5)
    else:
        assert torch.equal(loaded(x), model(x))
    assert set(peft_parameters(loaded)) == set(peft_parameters(model))


def test_loading_onto_a_different_base_model_is_refused(tmp_path):
    model = peft_model("gpt2-tiny", "lora")
    save_peft(model, tmp_path / "a", "lora", SETTINGS["lora"], base_fingerprint(model))
    other = base_model("gpt2-tiny", seed=1)
    with pytest.raises(LmlabError, match=r"trained on base model gpt2-2x32-\w+, not gpt2-2x32-\w+; load it onto"):
        load_peft(other, tmp_path / "a")


def test_fingerprint_names_the_base_weights_whatever_is_applied_or_merged_and_in_bf16_too():
    model = base_model("gpt2-tiny")
    fingerprint = base_fingerprint(model)
    assert fingerprint.startswith("gpt2-2x32-")
    assert base_fingerprint(merge_lora(peft_model("gpt2-tiny", "lora"))) == fingerprint
    assert base_fingerprint(peft_model("gpt2-tiny", "prompt")) == fingerprint
    assert base_fingerprint(model.to(torch.bfloat16)) == fingerprint


def test_saving_into_a_directory_with_other_files_is_refused(tmp_path):
    (tmp_path / "checkpoint.pt").write_text("keep me")
    model = peft_model("gpt2-tiny", "lora")
    with pytest.raises(LmlabError, match="holds other files"):
        save_peft(model, tmp_path, "lora", SETTINGS["lora"], base_fingerprint(model))
    assert (tmp_path / "checkpoint.pt").exists()


def test_bad_target_method_or_setting_is_one_clear_error():
    with pytest.raises(LmlabError, match=r"'attn\.q' matches no linear layer; valid names include "
                                         r"blocks\.0\.attention\.qkv, .*lm_head"):
        apply_lora(base_model("llama-tiny"), targets=["qkv", "attn.q"])
    with pytest.raises(LmlabError, match="unknown PEFT method 'qlora'; choose one of: lora, adapter"):
        apply_peft(base_model("llama-tiny"), "qlora")
    with pytest.raises(LmlabError, match="unknown setting.* r for PEFT method 'lora'; valid: rank"):
        apply_peft(base_model("llama-tiny"), "lora", r=4)


def test_none_leaves_everything_trainable_and_describe_reports_the_share():
    model = apply_peft(base_model("gpt2-tiny"), "none")
    assert count_parameters(model)[0] == count_parameters(model)[1]
    apply_lora(model, rank=2)
    trainable, total = count_parameters(model)
    assert trainable == 2 * (2 * (32 + 96) + 2 * (32 + 32))  # 2 layers of rank-2 qkv (32 -> 96) and out (32 -> 32)
    assert describe(model) == f"trainable 0.8K of {total / 1e3:.1f}K ({100 * trainable / total:.2f}%)"


@pytest.mark.parametrize("family", FAMILIES)
def test_prompt_tuning_equals_literal_concatenation_of_the_virtual_tokens(family):
    """With the prompt set to real token embeddings, the prompt-tuned model is the base model
    reading those tokens first (RoPE: exactly; learned positions: with the text placed after them)."""
    virtual = torch.tensor([7, 3, 11, 5])
    base = base_model(family)
    literal = base(torch.cat([virtual.expand(2, -1), x], dim=1))[:, 4:]
    model = apply_prompt_tuning(base_model(family), n_tokens=4)
    with torch.no_grad():
        model.prompt_tuning.embeddings.copy_(model.token_embedding.weight[virtual])
    positions = None if family == "llama-tiny" else torch.arange(4, 4 + x.size(1))
    torch.testing.assert_close(model(x, positions=positions), literal, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("method", ["prefix", "prompt"])
def test_prefix_and_prompt_ignore_padding_on_either_side(family, method):
    model = peft_model(family, method)
    short = torch.tensor([[8, 9, 10, 11]])
    alone = model(short)[0]
    left = model(torch.tensor([[0, 0, 8, 9, 10, 11]]), attention_mask=torch.tensor([[0, 0, 1, 1, 1, 1]]))[0, 2:]
    right = model(torch.tensor([[8, 9, 10, 11, 0, 0]]), attention_mask=torch.tensor([[1, 1, 1, 1, 0, 0]]))[0, :4]
    torch.testing.assert_close(left, alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(right, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family, method", [(f, m) for f in FAMILIES for m in ("prefix", "prompt")]
                         + [("llama-tiny", "lora"), ("llama-tiny", "adapter")])
def test_cached_greedy_equals_uncached_and_batched_equals_alone(family, method):
    model = peft_model(family, method)
    prompts = [[5, 9, 2, 7, 1], [4, 8]]
    alone = [generate(model, p, 8, temperature=0) for p in prompts]
    assert alone == [uncached_greedy(model, p, 8) for p in prompts]
    batched = generate_batch(model, prompts, GenerationConfig(max_new_tokens=8, temperature=0))
    assert [g.token_ids for g in batched] == alone


def test_a_deep_copy_of_a_prompt_tuned_model_runs_its_own_prompt():
    model = peft_model("llama-tiny", "prompt").train()
    model(x).sum().backward()  # a training pass leaves nothing behind that deepcopy would choke on
    twin = copy.deepcopy(model).eval()
    model.eval()
    before = model(x)
    with torch.no_grad():
        twin.prompt_tuning.embeddings.mul_(2.0)
    assert not torch.allclose(twin(x), before)
    assert torch.equal(model(x), before)


def test_methods_compose_and_switch_off_together():
    model = apply_prompt_tuning(base_model("llama-tiny"), n_tokens=3)
    apply_peft(model, "adapter", bottleneck=4)
    perturb(apply_lora(model, rank=2, targets=["qkv"]))  # the qkv inside the wrapped attention
    assert len(peft_parameters(model)) == 1 + 4 * 4 + 2 * 2  # prompt; 4 adapters of 2 layers; 2 LoRA pairs
    with adapters_disabled(model):
        assert torch.equal(model(x), base_model("llama-tiny")(x))
    assert generate(model, [5, 9, 2], 6, temperature=0) == uncached_greedy(model, [5, 9, 2], 6)

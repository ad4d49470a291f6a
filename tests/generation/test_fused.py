"""The fused C++ decoding step (`generation/fused.py`, `kernels/decoder_step.cpp`) computes what the modules
compute: the same logits up to float rounding, the same keys and values in the cache, the same greedy and
seeded-sampling tokens, rows at any positions (left-padded batches, the engine's slots); it takes only the
models it computes exactly."""

import pytest
import torch

import lmlab.generation.decode as decode
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.batch import new_cache
from lmlab.generation.compiled import compiled_decoder
from lmlab.generation.decode import last_logits
from lmlab.generation.fused import fused_step
from lmlab.generation.layout import decoding_view
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.models.quantize import quantize_model

pytestmark = pytest.mark.usefixtures("one_thread", "built_kernels")


def tiny(mode: str = "int4", family: str = "llama", group_size: int = 32, tie: bool = True, kv_heads: int = 2,
         seed: int = 0, context: int = 64) -> torch.nn.Module:
    """A small random decoder of odd shapes (3 layers, head_dim 16, grouped-query heads), quantized."""
    torch.manual_seed(seed)
    cfg = preset(f"{family}-tiny", vocab_size=120, context_length=context, n_layers=3, n_heads=4, d_model=64, d_ff=3 * group_size,
                 tie_embeddings=tie, **({"n_kv_heads": kv_heads} if family == "llama" else {}))
    model = build_decoder(cfg).eval()
    return quantize_model(model, mode, group_size) if mode != "fp32" else model


def eager(model, prompts, config):
    """generate_batch with the fused step switched off: the modules' own decoding."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode, "fused_step", lambda model: None)
        return [g.token_ids for g in generate_batch(model, prompts, config)]


@pytest.mark.parametrize("mode, group_size, kv_heads, tie", [
    ("int4", 32, 2, True), ("int4", 64, 4, False), ("int8", 32, 1, True), ("int8", 64, 2, False)])
def test_steps_give_the_modules_logits_and_cache(mode, group_size, kv_heads, tie):
    model = tiny(mode, group_size=group_size, kv_heads=kv_heads, tie=tie)
    step = fused_step(model)
    assert step is not None
    prompt = torch.tensor([[4, 8, 15, 16, 23, 42, 7], [9, 9, 1, 2, 3, 4, 5]])  # two rows of one length
    with torch.inference_mode():
        fused_cache, module_cache = new_cache(model, 2, 30), new_cache(model, 2, 30)
        last_logits(model, prompt, None, fused_cache)
        last_logits(model, prompt, None, module_cache)
        view = decoding_view(model)
        for token in ([3, 5], [100, 0], [42, 41], [7, 119]):
            ids = torch.tensor(token)
            fused = step(ids, fused_cache.k, fused_cache.v, [fused_cache.length] * 2)
            fused_cache.advance(1)
            modules = last_logits(view, ids[:, None], None, module_cache)
            torch.testing.assert_close(fused, modules, rtol=1e-5, atol=1e-5)
    assert fused_cache.length == module_cache.length == 11
    for layer in range(3):
        torch.testing.assert_close(fused_cache.k[layer], module_cache.k[layer], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fused_cache.v[layer], module_cache.v[layer], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", [GenerationConfig(max_new_tokens=20, temperature=0.0),
                                    GenerationConfig(max_new_tokens=20, temperature=0.9, top_k=20, seed=3)],
                         ids=["greedy", "seeded sampling"])
def test_generation_gives_the_modules_tokens(config):
    model = tiny("int4")
    for prompts in ([[4, 8, 15, 16, 23, 42]], [[1, 2, 3], [3, 2, 1]], [[7], [4, 8, 15], [9, 9]]):  # last: padded
        assert [g.token_ids for g in generate_batch(model, prompts, config)] == eager(model, prompts, config)


def test_only_the_decoders_it_computes_exactly_are_fused():
    assert fused_step(tiny("int4")) is not None
    assert fused_step(tiny("fp32")) is None  # float weights: the modules (or compiled_decoder)
    assert fused_step(tiny("int4", family="gpt2")) is None  # LayerNorm, GELU, biases, learned positions
    maps = tiny("int4")
    maps.blocks[1].attention.need_weights = True  # someone is reading attention maps
    assert fused_step(maps) is None
    training = tiny("int4").train()
    training.blocks[0].dropout.p = 0.1
    assert fused_step(training) is None
    hooked = tiny("int4")
    handle = hooked.blocks[2].register_forward_hook(lambda module, args, output: None)  # an inspect tool
    assert fused_step(hooked) is None
    handle.remove()
    assert fused_step(hooked) is not None
    with torch.nn.modules.module.register_module_forward_pre_hook(lambda module, args: None):
        assert fused_step(hooked) is None


def test_a_compiled_view_of_a_quantized_model_runs_the_fused_step(monkeypatch):
    model = tiny("int4")
    calls = []
    real = decode.fused_step
    monkeypatch.setattr(decode, "fused_step", lambda m: calls.append(m) or real(m))
    config = GenerationConfig(max_new_tokens=4)
    tokens = [g.token_ids for g in generate_batch(compiled_decoder(model), [[7], [4, 8, 15]], config)]
    assert len(calls) == 1 and tokens == eager(model, [[7], [4, 8, 15]], config)  # nothing compiled


def test_rows_at_their_own_positions_give_what_each_gives_alone():
    """The serving engine's slots: each row of the cache at its own length."""
    model = tiny("int4")
    step = fused_step(model)
    prompts = [[4, 8, 15, 16, 23, 42, 7], [9, 9], [1, 2, 3, 4]]
    with torch.inference_mode():
        shared = new_cache(model, 4, 20)  # one spare row, as a slot cache has
        alone = []
        for row, prompt in enumerate(prompts):
            own = new_cache(model, 1, 20)
            last_logits(model, torch.tensor([prompt]), None, own)
            for layer in range(3):
                shared.k[layer][row] = own.k[layer][0]
                shared.v[layer][row] = own.v[layer][0]
            alone.append((own, step(torch.tensor([row + 5]), own.k, own.v, [len(prompt)])))
        together = step(torch.tensor([5, 6, 7]), shared.k, shared.v, [len(p) for p in prompts])
    for row, (own, logits) in enumerate(alone):
        torch.testing.assert_close(together[row], logits[0], rtol=1e-5, atol=1e-5)
        n = len(prompts[row]) + 1
        torch.testing.assert_close(shared.k[2][row, :, :n], own.k[2][0, :, :n], rtol=1e-5, atol=1e-5)


def test_long_contexts_attend_on_every_thread_as_on_one():
    """Past ~16k multiply-adds a step's attention is shared among threads (decoder_step.cpp)."""
    model = tiny("int4", context=160)
    step = fused_step(model)
    prompts = torch.randint(0, 120, (3, 120), generator=torch.Generator().manual_seed(2))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.inference_mode():
            fused_cache, module_cache = new_cache(model, 3, 130), new_cache(model, 3, 130)
            last_logits(model, prompts, None, fused_cache)
            last_logits(model, prompts, None, module_cache)
            ids = torch.tensor([5, 6, 7])
            fused = step(ids, fused_cache.k, fused_cache.v, [120] * 3)  # 3 rows x 4 heads x 121 x 16: threaded
            modules = last_logits(decoding_view(model), ids[:, None], None, module_cache)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(fused, modules, rtol=1e-5, atol=1e-5)


def test_a_position_past_the_cache_is_refused():
    model = tiny("int4")
    step = fused_step(model)
    with torch.inference_mode():
        cache = new_cache(model, 1, 4)
        last_logits(model, torch.tensor([[1, 2, 3, 4]]), None, cache)
        with pytest.raises(RuntimeError, match="past the cache"):
            step(torch.tensor([5]), cache.k, cache.v, [cache.length])

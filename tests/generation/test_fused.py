"""The fused C++ decoding step (`generation/fused.py`, `kernels/decoder_step.cpp`) computes what the modules
compute: the same logits up to float rounding, the same keys and values in the cache, the same greedy and
seeded-sampling tokens, rows at any positions (left-padded batches, the engine's slots), for Llama and each
setting of today's Llama-like families; it takes only the models it computes exactly, and says why not."""

import copy

import pytest
import torch

import lmlab.generation.decode as decode
from lmlab.config import ModelConfig
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.batch import new_cache
from lmlab.generation.compiled import compiled_decoder
from lmlab.generation.decode import last_logits
from lmlab.generation.fused import fused_step, fused_step_refusal
from lmlab.generation.layout import decoding_view
from lmlab.inference.engine import Engine
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.models.quantize import quantize_model, quantized_decoder, quantized_state
from lmlab.modules.quantized import QuantizedLinear

pytestmark = pytest.mark.usefixtures("one_thread", "built_kernels")


def tiny(mode: str = "int4", family: str = "llama", group_size: int = 32, tie: bool = True, kv_heads: int = 2,
         seed: int = 0, context: int = 64) -> torch.nn.Module:
    """A small random decoder of odd shapes (3 layers, head_dim 16, grouped-query heads), quantized."""
    torch.manual_seed(seed)
    cfg = preset(f"{family}-tiny", vocab_size=120, context_length=context, n_layers=3, n_heads=4, d_model=64, d_ff=3 * group_size,
                 tie_embeddings=tie, **({"n_kv_heads": kv_heads} if family == "llama" else {}))
    model = build_decoder(cfg).eval()
    return quantize_model(model, mode, group_size) if mode != "fp32" else model


# Each setting of today's Llama-like families (models/decoder.py builds them) on one small random shape with
# windows shorter than the prompts and a head size of its own where the family has one
SETTINGS = {
    "qkv bias (Qwen2)": dict(qkv_bias=True),
    "q/k norms per head, own head size (Qwen3)": dict(qk_norm="head", head_size=24),
    "q/k norms over all heads, output norms (OLMo 2)": dict(qk_norm="all", norm_placement="output", n_kv_heads=4),
    "sliding window (Mistral, Phi-3)": dict(sliding_window=5, tie_embeddings=False),
    "Gemma 2": dict(ffn="geglu", norm_placement="sandwich", scale_embeddings=True, attention_scale=0.3,
                    attention_softcap=0.5, logit_softcap=0.8, sliding_window=4, global_every=2, head_size=32),
    "Gemma 3": dict(ffn="geglu", norm_placement="sandwich", qk_norm="head", scale_embeddings=True, attention_scale=0.15,
                    sliding_window=4, global_every=3, rope_local_base=1e2, head_size=32, n_kv_heads=1),
    "yarn RoPE scaling": dict(rope_scaling="yarn", rope_factor=4.0, rope_original_context=16),
}


def with_setting(name: str, mode: str = "int4") -> torch.nn.Module:
    """A random 4-layer decoder with SETTINGS[name], its norms and biases away from 1 and 0, quantized (or fp32)."""
    torch.manual_seed(1)
    llama = dict(vocab_size=120, context_length=64, n_layers=4, n_heads=4, n_kv_heads=2, d_model=64, d_ff=96,
                 norm="rmsnorm", norm_eps=1e-6, ffn="swiglu", positions="rope", bias=False)
    cfg = ModelConfig(family="llama", **{**llama, **SETTINGS[name]})
    model = build_decoder(cfg).eval()
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "norm" in key or key.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return quantize_model(model, mode, 32) if mode != "fp32" else model


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


@pytest.mark.parametrize("mode, T", [("int4", 3), ("int4", 6), ("int8", 5)])  # int4 past 4 rows: unpacked once
def test_several_tokens_a_row_give_the_modules_logits_and_cache(mode, T):
    """Speculative decoding's check: T new tokens a row, causal among themselves and over the cache, in one call."""
    model = tiny(mode, kv_heads=2)
    step = fused_step(model)
    prompt = torch.tensor([[4, 8, 15, 16, 23, 42, 7], [9, 9, 1, 2, 3, 4, 5]])  # two rows of one length
    new = torch.randint(0, 120, (2, T), generator=torch.Generator().manual_seed(T))
    with torch.inference_mode():
        fused_cache, module_cache = new_cache(model, 2, 30), new_cache(model, 2, 30)
        last_logits(model, prompt, None, fused_cache)
        last_logits(model, prompt, None, module_cache)
        fused = step(new, fused_cache.k, fused_cache.v, [fused_cache.length] * 2)  # (2, T, V)
        fused_cache.advance(T)
        view = decoding_view(model)
        modules = view.logits(view.hidden_states(new, None, None, kv_cache=module_cache))  # (2, T, V)
    assert fused.shape == (2, T, 120)
    torch.testing.assert_close(fused, modules, rtol=1e-5, atol=1e-5)
    assert fused_cache.length == module_cache.length == 7 + T
    for layer in range(3):
        torch.testing.assert_close(fused_cache.k[layer], module_cache.k[layer], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fused_cache.v[layer], module_cache.v[layer], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("setting", SETTINGS)
def test_several_tokens_a_row_give_what_one_at_a_time_gives(setting):
    """Each family's settings (windows shorter than the new tokens reach, q/k norms, soft-caps), rows at their
    own positions: T tokens in one call give the logits of T one-token steps."""
    model = with_setting(setting)
    step = fused_step(model)
    prompts, T = [[4, 8, 15, 16, 23, 42, 7], [9, 9]], 5
    new = torch.randint(0, 120, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        caches = [new_cache(model, 2, 20) for _ in range(2)]
        for row, prompt in enumerate(prompts):
            own = new_cache(model, 1, 20)
            last_logits(model, torch.tensor([prompt]), None, own)
            for cache in caches:
                for layer in range(len(model.blocks)):
                    cache.k[layer][row], cache.v[layer][row] = own.k[layer][0], own.v[layer][0]
        at_once = step(new, caches[0].k, caches[0].v, [len(p) for p in prompts])  # (2, T, V)
        one_by_one = torch.stack([step(new[:, t], caches[1].k, caches[1].v, [len(p) + t for p in prompts])
                                  for t in range(T)], 1)  # (2, T, V)
    torch.testing.assert_close(at_once, one_by_one, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", [GenerationConfig(max_new_tokens=20, temperature=0.0),
                                    GenerationConfig(max_new_tokens=20, temperature=0.9, top_k=20, seed=3)],
                         ids=["greedy", "seeded sampling"])
def test_generation_gives_the_modules_tokens(config):
    model = tiny("int4")
    for prompts in ([[4, 8, 15, 16, 23, 42]], [[1, 2, 3], [3, 2, 1]], [[7], [4, 8, 15], [9, 9]]):  # last: padded
        assert [g.token_ids for g in generate_batch(model, prompts, config)] == eager(model, prompts, config)


def recorded(model, prompts, config, fused: bool = True):
    """generate_batch's tokens and the logits (steps, B, V) of every step after the first, with the fused step or
    through the modules."""
    seen = []
    real = decode.token_steps

    def spy(logits, advance, *rest):
        return real(logits, lambda token: seen.append(advance(token)) or seen[-1], *rest)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode, "token_steps", spy)
        if not fused:
            patch.setattr(decode, "fused_step", lambda model: None)
        tokens = [g.token_ids for g in generate_batch(model, prompts, config)]
    return tokens, torch.stack(seen)


@pytest.mark.parametrize("mode", ["int4", "int8"])
@pytest.mark.parametrize("setting", SETTINGS)
def test_each_setting_of_the_families_is_fused_with_the_modules_logits_and_tokens(setting, mode):
    model = with_setting(setting, mode)
    assert fused_step_refusal(model) is None and fused_step(model) is not None
    prompts = [[4, 8, 15, 16, 23, 42, 7, 99, 3], [9, 9, 1], [1, 2, 3, 4, 5, 6]]  # left-padded, past every window
    config = GenerationConfig(max_new_tokens=12, temperature=0.0)
    tokens, logits = recorded(model, prompts, config)
    eager_tokens, eager_logits = recorded(model, prompts, config, fused=False)
    assert tokens == eager_tokens
    torch.testing.assert_close(logits, eager_logits, rtol=0, atol=1e-4)


@pytest.mark.parametrize("setting", ["Gemma 2", "q/k norms over all heads, output norms (OLMo 2)"])
def test_each_setting_quantizes_near_its_float_model_and_reads_back(setting):
    """int8 / int4 keep the norms (q/k, post) and biases as they are: logits near the float model's (random
    weights of 64 columns round coarsely), read back exactly."""
    model = with_setting(setting, "fp32")
    ids = torch.tensor([[4, 8, 15, 16, 23, 42, 7, 99, 3]])
    floats = dict(model.named_parameters())
    with torch.no_grad():
        reference = model(ids)
        for mode, error in (("int8", 0.05), ("int4", 0.3)):
            quantized = quantize_model(copy.deepcopy(model), mode, 32)
            kept = dict(quantized.named_parameters())
            assert kept and all(torch.equal(p, floats[key]) for key, p in kept.items())
            logits = quantized(ids)
            assert (logits - reference).norm() / reference.norm() < error
            assert torch.equal(quantized_decoder(model.config, quantized_state(quantized))(ids), logits)


def test_only_the_decoders_it_computes_exactly_are_fused():
    assert fused_step(tiny("int4")) is not None
    assert fused_step(tiny("fp32")) is None  # float weights: the modules (or compiled_decoder)
    assert "float" in fused_step_refusal(tiny("fp32"))
    assert fused_step(tiny("int4", family="gpt2")) is None  # LayerNorm, GELU, biases, learned positions
    assert "GPT-2" in fused_step_refusal(tiny("int4", family="gpt2"))
    maps = tiny("int4")
    maps.blocks[1].attention.need_weights = True  # someone is reading attention maps
    assert fused_step(maps) is None and "attention maps" in fused_step_refusal(maps)
    training = tiny("int4").train()
    training.blocks[0].dropout.p = 0.1
    assert fused_step(training) is None and "dropout" in fused_step_refusal(training)
    hooked = tiny("int4")
    handle = hooked.blocks[2].register_forward_hook(lambda module, args, output: None)  # an inspect tool
    assert fused_step(hooked) is None and "hook" in fused_step_refusal(hooked)
    handle.remove()
    assert fused_step(hooked) is not None and fused_step_refusal(hooked) is None
    with torch.nn.modules.module.register_module_forward_pre_hook(lambda module, args: None):
        assert fused_step(hooked) is None
    mixed = with_setting("Gemma 2")
    mixed.blocks[1].feed_forward.activation = torch.nn.functional.gelu  # exact GELU: a gate the step does not take
    assert fused_step(mixed) is None and "feed-forward" in fused_step_refusal(mixed)


def test_a_compiled_view_of_a_quantized_model_runs_the_fused_step(monkeypatch):
    model = tiny("int4")
    calls = []
    real = decode.fused_step
    monkeypatch.setattr(decode, "fused_step", lambda m: calls.append(m) or real(m))
    config = GenerationConfig(max_new_tokens=4)
    tokens = [g.token_ids for g in generate_batch(compiled_decoder(model), [[7], [4, 8, 15]], config)]
    assert len(calls) == 1 and tokens == eager(model, [[7], [4, 8, 15]], config)  # nothing compiled


@pytest.mark.parametrize("setting", ["Llama", *SETTINGS])
def test_rows_at_their_own_positions_give_what_each_gives_alone(setting):
    """The serving engine's slots: each row of the cache at its own length."""
    model = tiny("int4") if setting == "Llama" else with_setting(setting)
    step = fused_step(model)
    prompts = [[4, 8, 15, 16, 23, 42, 7], [9, 9], [1, 2, 3, 4]]
    with torch.inference_mode():
        shared = new_cache(model, 4, 20)  # one spare row, as a slot cache has
        alone = []
        for row, prompt in enumerate(prompts):
            own = new_cache(model, 1, 20)
            last_logits(model, torch.tensor([prompt]), None, own)
            for layer in range(len(model.blocks)):
                shared.k[layer][row] = own.k[layer][0]
                shared.v[layer][row] = own.v[layer][0]
            alone.append((own, step(torch.tensor([row + 5]), own.k, own.v, [len(prompt)])))
        together = step(torch.tensor([5, 6, 7]), shared.k, shared.v, [len(p) for p in prompts])
    for row, (own, logits) in enumerate(alone):
        torch.testing.assert_close(together[row], logits[0], rtol=1e-5, atol=1e-5)
        n = len(prompts[row]) + 1
        torch.testing.assert_close(shared.k[2][row, :, :n], own.k[2][0, :, :n], rtol=1e-5, atol=1e-5)


class Digits:
    """Just enough of a tokenizer for the engine: token i is the text str(i % 10), no stop tokens."""

    stop_ids = ()

    def decode(self, ids, **kwargs) -> str:
        return "".join(str(i % 10) for i in ids)


@pytest.mark.parametrize("setting", ["Gemma 2", "Gemma 3"])
def test_the_engine_serves_each_slot_what_it_gets_alone(setting):
    model = with_setting(setting)
    prompts = [[4, 8, 15, 16, 23, 42, 7, 99, 3], [9, 9, 1], [1, 2, 3, 4, 5, 6], [7]]
    config = GenerationConfig(max_new_tokens=10, temperature=0.0)
    with Engine(model, Digits(), slots=3) as engine:
        assert engine._fused is not None
        served = [[t for chunk in engine.submit(p, config) for t in chunk.token_ids] for p in prompts]
    assert served == [eager(model, [p], config)[0] for p in prompts]


def on_threads(threads: int, fn):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("rounding", [None, "q8_1", "q8_0"])
@pytest.mark.parametrize("setting", ["Llama", *SETTINGS])
def test_a_team_of_threads_computes_bit_for_bit_what_one_thread_computes(setting, rounding):
    """decoder_step shares each matrix's output rows among torch's threads, and the attention heads past ~16k
    multiply-adds (the Llama case's 120 positions), each number computed whole by one thread: on 2 or 3 threads
    the logits and the cache are the very numbers of one thread, whichever setting and rounding, for rows at
    their own positions and for several tokens a row (a speculative check)."""
    model = tiny("int4", context=160) if setting == "Llama" else with_setting(setting)
    for layer in model.modules():
        if rounding and isinstance(layer, QuantizedLinear):
            layer.activations = rounding
    step = fused_step(model)
    longest = 120 if setting == "Llama" else 30
    prompts = [torch.randint(0, 120, (1, n), generator=torch.Generator().manual_seed(n)) for n in (longest, 3, 9)]
    new = torch.randint(0, 120, (3, 4), generator=torch.Generator().manual_seed(7))

    def run():
        with torch.inference_mode():
            cache = new_cache(model, 3, longest + 8)
            for row, prompt in enumerate(prompts):
                own = new_cache(model, 1, longest + 8)
                last_logits(model, prompt, None, own)
                for layer in range(len(model.blocks)):
                    cache.k[layer][row], cache.v[layer][row] = own.k[layer][0], own.v[layer][0]
            lengths = [p.size(1) for p in prompts]
            one_each = step(new[:, 0], cache.k, cache.v, lengths)
            several = step(new[:, 1:], cache.k, cache.v, [n + 1 for n in lengths])
        return one_each, several, cache.k, cache.v

    alone = on_threads(1, run)
    for threads in (2, 3):
        team = on_threads(threads, run)
        for ours, theirs in zip(team[:2], alone[:2]):
            assert torch.equal(ours, theirs)
        for ours, theirs in zip([*team[2], *team[3]], [*alone[2], *alone[3]]):
            assert torch.equal(ours, theirs)


def test_a_position_past_the_cache_is_refused():
    model = tiny("int4")
    step = fused_step(model)
    with torch.inference_mode():
        cache = new_cache(model, 1, 4)
        last_logits(model, torch.tensor([[1, 2, 3, 4]]), None, cache)
        with pytest.raises(RuntimeError, match="past the cache"):
            step(torch.tensor([5]), cache.k, cache.v, [cache.length])


@pytest.mark.parametrize("length, fused_prefill", [(5, True), (decode.FUSED_PROMPT, True), (decode.FUSED_PROMPT + 1, False)])
def test_a_short_prompt_fills_the_cache_through_the_fused_step_with_the_modules_logits(length, fused_prefill):
    model = tiny("int4")
    prompts = [list(range(3, 3 + length)), list(range(40, 40 + length))]  # two rows, no padding
    first, shapes = {}, []
    real_steps, real_fused = decode.token_steps, decode.fused_step

    def spy_steps(logits, *rest):
        first[len(first)] = logits
        return real_steps(logits, *rest)

    def spy_fused(model):
        step = real_fused(model)
        return step and (lambda ids, *rest: shapes.append(tuple(ids.shape)) or step(ids, *rest))

    config = GenerationConfig(max_new_tokens=8)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode, "token_steps", spy_steps)
        patch.setattr(decode, "fused_step", spy_fused)
        tokens = [g.token_ids for g in generate_batch(model, prompts, config)]
        patch.setattr(decode, "fused_step", lambda model: None)
        assert tokens == [g.token_ids for g in generate_batch(model, prompts, config)]
    assert ((2, length) in shapes) == fused_prefill
    torch.testing.assert_close(first[0], first[1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["q8_0", "q8_1"])
def test_with_activations_rounded_as_llama_cpp_rounds_them_the_engine_and_generation_give_the_modules_tokens(kind):
    """`--activations int8`: every matrix rounds its input per row, so a row's tokens do not depend on the
    rows beside it, and the fused step's integer products give the modules' greedy tokens."""
    model = tiny("int4")
    for layer in model.modules():
        if isinstance(layer, QuantizedLinear):
            layer.activations = kind
    assert fused_step_refusal(model) is None
    prompts = [[4, 8, 15, 16, 23, 42, 7, 99, 3], [9, 9, 1], [1, 2, 3, 4, 5, 6], [7]]
    config = GenerationConfig(max_new_tokens=10, temperature=0.0)
    alone = [eager(model, [p], config)[0] for p in prompts]
    assert [generate_batch(model, [p], config)[0].token_ids for p in prompts] == alone
    with Engine(model, Digits(), slots=3) as engine:
        assert engine._fused is not None
        assert [[t for chunk in engine.submit(p, config) for t in chunk.token_ids] for p in prompts] == alone

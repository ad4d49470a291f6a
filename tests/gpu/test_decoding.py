"""Decoders on the GPU compute what they compute on the CPU: the logits of tiny random GPT-2, Llama, Mistral
(a sliding window) and Gemma 2 (soft-capping, local and global layers) models agree to fp32 rounding, and
greedy decoding with the KV cache (one prompt, a left-padded batch, beam search) picks the same tokens;
seeded sampling on the GPU repeats itself. Skipped without CUDA; LMLAB_GPU_TESTS_DEVICE=cpu runs it on the
CPU (tests/gpu_device.py)."""

import pytest
import torch

from gpu_device import DEVICE, on, on_device
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset

pytestmark = [on_device, pytest.mark.usefixtures("one_thread")]

SHAPE = dict(vocab_size=300, context_length=64, n_layers=2, n_heads=4, d_model=64, d_ff=128)
# Small windows, so that 24 new tokens run past them and the cache drops keys (`KVCache.keep_last`).
FAMILIES = {"gpt2": ("gpt2-tiny", {}), "llama": ("llama-tiny", {"n_kv_heads": 2}),
            "mistral": ("mistral-tiny", {"n_kv_heads": 2, "sliding_window": 8}),
            "gemma2": ("gemma2-tiny", {"n_kv_heads": 2, "head_size": 16, "sliding_window": 8})}
PROMPTS = [[5, 9, 2, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [42]]  # lengths differ: the batch is left-padded


@pytest.fixture(scope="module", params=list(FAMILIES))
def models(request):
    """(the model on the CPU, its copy on the device), in eval mode."""
    name, overrides = FAMILIES[request.param]
    torch.manual_seed(0)
    model = build_decoder(preset(name, **SHAPE, **overrides)).eval()
    return model, on(model)


def test_logits_match_the_cpu(models):
    cpu, device = models
    ids = torch.randint(0, SHAPE["vocab_size"], (3, 40), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :7] = 0  # a left-padded row
    with torch.no_grad():
        for m in (None, mask):
            expected = cpu(ids, m)
            got = device(ids.to(DEVICE), None if m is None else m.to(DEVICE))
            assert got.device.type == DEVICE.type
            torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_greedy_decoding_with_the_cache_picks_the_cpu_s_tokens(models):
    cpu, device = models
    config = GenerationConfig(max_new_tokens=24)
    for prompts in ([PROMPTS[0]], PROMPTS):  # one prompt; a left-padded batch
        expected = [g.token_ids for g in generate_batch(cpu, prompts, config)]
        assert [g.token_ids for g in generate_batch(device, prompts, config)] == expected
        assert all(len(ids) == 24 for ids in expected)


def test_beam_search_picks_the_cpu_s_beams(models):
    cpu, device = models
    config = GenerationConfig(max_new_tokens=10, num_beams=3)
    expected = generate_batch(cpu, PROMPTS[:2], config)
    got = generate_batch(device, PROMPTS[:2], config)
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    assert [g.score for g in got] == pytest.approx([g.score for g in expected], rel=1e-4)


def test_seeded_sampling_on_the_device_repeats_and_top_k_1_is_greedy(models):
    _, device = models
    sampled = GenerationConfig(max_new_tokens=20, temperature=1.0, top_p=0.95, seed=7)
    first = [g.token_ids for g in generate_batch(device, PROMPTS, sampled)]
    assert [g.token_ids for g in generate_batch(device, PROMPTS, sampled)] == first
    reseeded = GenerationConfig(max_new_tokens=20, temperature=1.0, top_p=0.95, seed=8)
    assert [g.token_ids for g in generate_batch(device, PROMPTS, reseeded)] != first
    assert all(0 <= t < SHAPE["vocab_size"] for ids in first for t in ids)
    top_1 = GenerationConfig(max_new_tokens=20, temperature=1.0, top_k=1, seed=7)
    greedy = GenerationConfig(max_new_tokens=20)
    assert ([g.token_ids for g in generate_batch(device, PROMPTS, top_1)]
            == [g.token_ids for g in generate_batch(device, PROMPTS, greedy)])

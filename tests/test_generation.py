"""Decoding: greedy is argmax, filters keep the right tokens, seeds reproduce, the cache changes nothing."""

import pytest
import torch

from lmlab.config import preset
from lmlab.errors import LmlabError
from lmlab.generation.generate import generate
from lmlab.generation.sampling import filter_logits, next_token
from lmlab.models.decoder import build_decoder


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_decoder(preset("llama-tiny", vocab_size=64, context_length=48, n_layers=2)).eval()


def test_greedy_with_cache_equals_argmax_without(model):
    prompt = [5, 9, 2]
    new = generate(model, prompt, 12, temperature=0)
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(12):
            ids.append(model(torch.tensor([ids]))[0, -1].argmax().item())
    assert new == ids[3:]


def test_same_seed_same_sample_different_seed_differs(model):
    a = generate(model, [1, 2], 20, temperature=1.5, seed=7)
    assert a == generate(model, [1, 2], 20, temperature=1.5, seed=7)
    assert a != generate(model, [1, 2], 20, temperature=1.5, seed=8)


def test_eos_stops_generation(model):
    greedy = generate(model, [3], 10, temperature=0)
    assert generate(model, [3], 10, temperature=0, eos_id=greedy[4]) == greedy[:greedy.index(greedy[4])]


def test_top_k_keeps_k_best():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    kept = filter_logits(logits, top_k=2).isfinite()
    assert kept.tolist() == [[False, True, False, True, False]]


def test_top_p_keeps_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert filter_logits(probs.log(), top_p=0.7).isfinite().tolist() == [[True, True, False, False]]
    assert filter_logits(probs.log(), top_p=0.8).isfinite().tolist() == [[True, True, False, False]]
    assert filter_logits(probs.log(), top_p=0.81).isfinite().tolist() == [[True, True, True, False]]
    assert filter_logits(probs.log(), top_p=0.1).isfinite().tolist() == [[True, False, False, False]]


def test_sampling_never_picks_filtered_tokens():
    logits = torch.tensor([[0.0, 0.1, 0.2, 10.0]]).repeat(500, 1)
    picks = next_token(logits, temperature=5.0, top_k=2, generator=torch.Generator().manual_seed(0))
    assert set(picks.tolist()) == {2, 3}


def test_prompt_beyond_context_is_an_error(model):
    with pytest.raises(LmlabError, match="exceeds the model's context of 48"):
        generate(model, list(range(40)), 10)

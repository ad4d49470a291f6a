"""Objectives, losses and perplexity as pure functions."""

import math

import numpy as np
import pytest
import torch

from lmlab.eval.baselines import unigram_perplexity
from lmlab.eval.perplexity import perplexity
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.objectives.causal_lm import causal_lm
from lmlab.targets import IGNORE_INDEX


def test_causal_lm_shifts_by_one_and_ignores_padding():
    block = torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]])
    inputs, targets = causal_lm(block, padding_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]))
    assert inputs.tolist() == [[10, 11, 12], [20, 21, 22]]
    assert targets.tolist() == [[11, 12, 13], [21, IGNORE_INDEX, IGNORE_INDEX]]


def test_cross_entropy_ignores_ignored_targets():
    logits = torch.randn(1, 3, 5)
    targets = torch.tensor([[1, IGNORE_INDEX, 4]])
    expected = -(logits[0, 0].log_softmax(-1)[1] + logits[0, 2].log_softmax(-1)[4]) / 2
    torch.testing.assert_close(cross_entropy(logits, targets), expected)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_decoder(preset("gpt2-tiny", vocab_size=50, context_length=16, n_layers=1)).eval()


def test_perplexity_is_exp_mean_nll_of_tokens_2_to_n(model):
    ids = torch.randint(0, 50, (12,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        log_probs = model(ids[None, :-1])[0].log_softmax(-1)
    nll = -log_probs.gather(1, ids[1:, None]).sum().item()
    result = perplexity(model, ids, context_length=16)
    assert result.tokens == 12
    assert result.nll_sum == pytest.approx(nll, rel=1e-5)
    assert result.perplexity == pytest.approx(math.exp(nll / 11), rel=1e-5)


def nll_with_context(model, ids, t, start):
    """-log p(ids[t] | ids[start:t]) computed on its own."""
    with torch.no_grad():
        return -model(ids[None, start:t])[0, -1].log_softmax(-1)[ids[t]].item()


@pytest.mark.parametrize("stride", [1, 5, 8, 15])
def test_strided_windows_score_every_token_once_with_the_context_they_allow(model, stride):
    ids = torch.randint(0, 50, (40,), generator=torch.Generator().manual_seed(1))
    ends = list(range(16, 40, stride)) + [40]  # window k ends at ends[k] and starts 16 tokens earlier
    expected = 0.0
    for t in range(1, 40):
        if t < 16:
            start = 0  # the first window: full prefix
        else:
            end = next(e for e in ends if e > t)
            start = end - 16
        expected += nll_with_context(model, ids, t, start)
    result = perplexity(model, ids, context_length=16, stride=stride)
    assert result.nll_sum == pytest.approx(expected, rel=1e-5)


def test_text_within_context_is_scored_in_one_window_whatever_the_stride(model):
    ids = torch.randint(0, 50, (16,), generator=torch.Generator().manual_seed(2))
    assert perplexity(model, ids, 16, stride=3).nll_sum == pytest.approx(perplexity(model, ids, 16).nll_sum)


def test_unigram_perplexity_of_uniform_text_is_vocab_size():
    tokens = np.arange(10).repeat(100)
    assert unigram_perplexity(tokens, tokens, 10) == pytest.approx(10.0)

"""BART noise functions, each alone: masking hides exactly its share, deletion keeps the order,
infilling puts one mask per span (0-length spans included) with Poisson(3) lengths and leaves the
rest in place, permutation keeps the sentences, rotation is a rotation; composed, they are applied
left to right from one rng; none changes its input."""

import math
import random
from collections import Counter
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmlab.errors import LmlabError
from lmlab.objectives.denoising import (
    bart_default_noise,
    bart_denoising,
    compose,
    document_rotation,
    infilling_spans,
    poisson,
    sentence_permutation,
    text_infilling,
    token_deletion,
    token_masking,
)
from lmlab.objectives.sentences import split_sentences

MASK, ENDS = -1, {0}  # documents use ids 0..99, with 0 as the sentence end

documents = st.lists(st.integers(0, 99), max_size=200)
seeds = st.integers(0, 2**32 - 1)
ratios = st.floats(0.0, 1.0)


def is_subsequence(short: list[int], long: list[int]) -> bool:
    rest = iter(long)
    return all(token in rest for token in short)


@settings(max_examples=100, deadline=None)
@given(documents, seeds, ratios)
def test_masking_hides_exactly_its_share_and_leaves_the_rest(tokens, seed, ratio):
    original = list(tokens)
    noisy = token_masking(tokens, random.Random(seed), mask_id=MASK, ratio=ratio)
    assert tokens == original and len(noisy) == len(tokens)
    assert noisy.count(MASK) == round(ratio * len(tokens))
    assert all(n == t for n, t in zip(noisy, tokens) if n != MASK)


@settings(max_examples=100, deadline=None)
@given(documents, seeds, ratios)
def test_deletion_removes_its_share_and_keeps_the_order(tokens, seed, ratio):
    original = list(tokens)
    noisy = token_deletion(tokens, random.Random(seed), ratio=ratio)
    assert tokens == original
    assert len(noisy) == len(tokens) - round(ratio * len(tokens))
    assert is_subsequence(noisy, tokens)


@settings(max_examples=200, deadline=None)
@given(documents, seeds, st.floats(0.0, 1.0), st.floats(0.5, 6.0))
def test_infilling_puts_one_mask_per_span_and_the_original_back_from_the_spans(tokens, seed, ratio, lam):
    original = list(tokens)
    spans = infilling_spans(len(tokens), random.Random(seed), ratio=ratio, poisson_lambda=lam)
    noisy = text_infilling(tokens, random.Random(seed), mask_id=MASK, ratio=ratio, poisson_lambda=lam)
    assert tokens == original
    assert noisy.count(MASK) == len(spans)
    assert sum(n for _, n in spans) == math.ceil(ratio * len(tokens))
    assert all(start + n <= next_start for (start, n), (next_start, _) in zip(spans, spans[1:]))
    hidden = iter([tokens[start:start + n] for start, n in spans])
    assert [t for token in noisy for t in (next(hidden) if token == MASK else [token])] == tokens
    kept = [t for i, t in enumerate(tokens) if not any(s <= i < s + n for s, n in spans)]
    assert [t for t in noisy if t != MASK] == kept


def test_infilling_span_lengths_are_poisson_with_mean_lambda_and_zero_length_spans_occur():
    rng = random.Random(0)
    spans = [span for _ in range(200) for span in infilling_spans(1000, rng, ratio=0.3, poisson_lambda=3.0)]
    lengths = [n for _, n in spans]
    assert abs(sum(lengths) / len(lengths) - 3.0) < 0.1  # ~20k spans; only the last of each row is cut
    assert abs(lengths.count(0) / len(lengths) - math.exp(-3.0)) < 0.01  # P(0) = e^-3 ~ 5 %
    draws = [poisson(rng, 3.0) for _ in range(20_000)]
    mean = sum(draws) / len(draws)
    assert abs(mean - 3.0) < 0.05 and abs(sum((d - mean) ** 2 for d in draws) / len(draws) - 3.0) < 0.15
    assert abs(Counter(draws)[2] / len(draws) - 4.5 * math.exp(-3.0)) < 0.01  # P(2) = 3^2/2! e^-3


def test_a_zero_length_span_inserts_a_mask_between_two_kept_tokens():
    tokens = list(range(1, 101))  # distinct, so each kept token can be found in the output
    for seed in range(1000):
        spans = infilling_spans(len(tokens), random.Random(seed), ratio=0.3, poisson_lambda=3.0)
        kept = [t for i, t in enumerate(tokens) if not any(s <= i < s + n for s, n in spans)]
        lonely = [s for s, n in spans if n == 0 and 0 < s and tokens[s - 1] in kept and tokens[s] in kept]
        if lonely:
            break
    assert lonely, "no 0-length span between two kept tokens in 1000 documents"
    noisy = text_infilling(tokens, random.Random(seed), mask_id=MASK, ratio=0.3, poisson_lambda=3.0)
    at = noisy.index(tokens[lonely[0] - 1])
    assert noisy[at:at + 3] == [tokens[lonely[0] - 1], MASK, tokens[lonely[0]]]


sentence_lists = st.lists(st.lists(st.integers(1, 99), max_size=6), max_size=12)


@settings(max_examples=100, deadline=None)
@given(sentence_lists, seeds)
def test_permutation_keeps_the_multiset_of_sentences(sentences, seed):
    tokens = [t for sentence in sentences for t in sentence + [0]]
    original = list(tokens)
    noisy = sentence_permutation(tokens, random.Random(seed), sentence_end_ids=ENDS)
    assert tokens == original
    assert sorted(split_sentences(noisy, ENDS)) == sorted(split_sentences(tokens, ENDS))


@settings(max_examples=100, deadline=None)
@given(documents, seeds)
def test_permutation_keeps_every_token_even_after_an_unfinished_last_sentence(tokens, seed):
    noisy = sentence_permutation(tokens, random.Random(seed), sentence_end_ids=ENDS)
    assert Counter(noisy) == Counter(tokens)


def test_permutation_draws_every_order():
    tokens = [1, 0, 2, 0, 3, 0]
    orders = Counter(tuple(sentence_permutation(tokens, random.Random(s), sentence_end_ids=ENDS))
                     for s in range(600))
    assert len(orders) == 6 and min(orders.values()) > 60


@settings(max_examples=100, deadline=None)
@given(documents, seeds)
def test_rotation_is_a_rotation(tokens, seed):
    original = list(tokens)
    noisy = document_rotation(tokens, random.Random(seed))
    assert tokens == original
    assert any(noisy == tokens[k:] + tokens[:k] for k in range(max(len(tokens), 1)))


def test_rotation_starts_at_every_token_equally_often():
    tokens, draws = list(range(10)), 10_000
    starts = Counter(document_rotation(tokens, random.Random(s))[0] for s in range(draws))
    assert len(starts) == 10 and all(abs(n - draws / 10) < 5 * (draws * 0.09) ** 0.5 for n in starts.values())


def test_compose_applies_left_to_right_from_one_rng():
    tokens = list(range(1, 50))
    delete, rotate = partial(token_deletion, ratio=0.2), document_rotation
    rng = random.Random(7)
    by_hand = rotate(delete(tokens, rng), rng)
    assert compose(delete, rotate)(tokens, random.Random(7)) == by_hand
    assert compose(rotate, delete)(tokens, random.Random(7)) != by_hand


def test_bart_default_is_permutation_then_infilling_of_thirty_percent():
    tokens = [t for s in range(12) for t in [10 + s, 20 + s, 30 + s, 0]]
    noise = bart_default_noise(MASK, ENDS)
    inputs, targets = bart_denoising(tokens, random.Random(5), noise)
    rng = random.Random(5)
    permuted = sentence_permutation(tokens, rng, sentence_end_ids=ENDS)
    assert inputs == text_infilling(permuted, rng, mask_id=MASK, ratio=0.3, poisson_lambda=3.0)
    assert targets == tokens and targets is not tokens


def test_noise_follows_the_rng():
    tokens, noise = list(range(1, 200)), bart_default_noise(MASK, ENDS)
    assert noise(tokens, random.Random(1)) == noise(tokens, random.Random(1))
    assert noise(tokens, random.Random(1)) != noise(tokens, random.Random(2))


@pytest.mark.parametrize("fn", [partial(token_masking, mask_id=MASK, ratio=1.5), partial(token_deletion, ratio=-0.1),
                                partial(text_infilling, mask_id=MASK, ratio=2.0),
                                partial(text_infilling, mask_id=MASK, poisson_lambda=0.0)])
def test_out_of_range_settings_are_a_clear_error(fn):
    with pytest.raises(LmlabError, match="must be"):
        fn(list(range(10)), random.Random(0))

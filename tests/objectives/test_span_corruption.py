"""T5 span corruption: putting the target spans back at the sentinels gives the original; spans are
non-empty, separated, start after kept tokens and end the sequence; the noise fraction and the mean
span length are the asked ones; the length helpers agree with what span_corruption returns."""

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmlab.errors import LmlabError
from lmlab.objectives.span_corruption import (
    noise_counts,
    noise_spans,
    random_segmentation,
    span_corruption,
    span_corruption_lengths,
    span_corruption_raw_length,
    t5_sentinel_tokens,
)

SENTINELS = list(range(32000, 32100))  # ids the documents below never use


def uncorrupt(inputs: list[int], targets: list[int], sentinels: list[int]) -> list[int]:
    """Put each target span back in place of its sentinel in the inputs."""
    spans, sentinel_of = {}, set(sentinels)
    for token in targets:
        if token in sentinel_of:
            spans[token] = current = []
        else:
            current.append(token)
    return [t for token in inputs for t in (spans[token] if token in sentinel_of else [token])]


documents = st.lists(st.integers(0, 999), max_size=300)


@settings(max_examples=200, deadline=None)
@given(documents, st.integers(0, 2**32 - 1), st.floats(0.05, 0.5), st.floats(1.0, 8.0))
def test_putting_target_spans_back_at_the_sentinels_gives_the_original(tokens, seed, density, mean):
    original = list(tokens)
    inputs, targets = span_corruption(tokens, SENTINELS, random.Random(seed), density, mean)
    assert tokens == original  # the input list is left alone
    assert uncorrupt(inputs, targets, SENTINELS) == tokens
    assert (len(inputs), len(targets)) == span_corruption_lengths(len(tokens), density, mean)
    n_spans = sum(t in SENTINELS for t in targets)
    assert [t for t in inputs if t in SENTINELS] == [t for t in targets if t in SENTINELS] == SENTINELS[:n_spans]


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 500), st.integers(0, 2**32 - 1))
def test_spans_are_non_empty_separated_after_kept_tokens_and_end_the_sequence(length, seed):
    spans = noise_spans(length, random.Random(seed))
    n_noise, n_spans = noise_counts(length)
    assert len(spans) == n_spans >= 1
    assert sum(end - start for start, end in spans) == n_noise >= 1
    assert spans[0][0] > 0 and spans[-1][1] == length  # kept tokens first, a noise span last (T5's layout)
    assert all(start < end for start, end in spans)
    assert all(end < next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))


def test_noise_fraction_and_mean_span_length_are_the_asked_ones_over_many_draws():
    rng = random.Random(0)
    lengths = [rng.randrange(20, 1000) for _ in range(500)]
    spans = [noise_spans(n, rng) for n in lengths]
    span_lengths = [end - start for row in spans for start, end in row]
    assert abs(sum(span_lengths) / sum(lengths) - 0.15) < 0.005
    assert abs(sum(span_lengths) / len(span_lengths) - 3.0) < 0.05
    assert all(abs(sum(e - s for s, e in row) - 0.15 * n) <= 0.5 for row, n in zip(spans, lengths))  # per row too
    assert max(span_lengths) > 6  # lengths vary around the mean, not all 3


def test_noise_covers_every_inner_position_about_as_often_as_the_density_over_many_draws():
    length, draws = 100, 3000
    hits = Counter()
    rng = random.Random(0)
    for _ in range(draws):
        for start, end in noise_spans(length, rng):
            hits.update(range(start, end))
    inner = [hits[i] / draws for i in range(20, 80)]
    assert all(0.10 < f < 0.20 for f in inner), inner
    assert hits[0] == 0 and hits[length - 1] == draws  # the layout: kept tokens first, a noise span last


def test_segmentation_draws_every_composition_equally_often():
    rng, draws = random.Random(0), 12_000
    counts = Counter(tuple(random_segmentation(5, 3, rng)) for _ in range(draws))
    assert len(counts) == 6  # C(4, 2) ways to cut 5 items into 3 non-empty segments
    assert all(sum(c) == 5 and min(c) >= 1 for c in counts)
    expected, sd = draws / 6, (draws * (1 / 6) * (5 / 6)) ** 0.5
    assert all(abs(n - expected) < 5 * sd for n in counts.values()), counts


def test_corruption_follows_the_rng():
    tokens = list(range(200))
    assert span_corruption(tokens, SENTINELS, random.Random(3)) == span_corruption(tokens, SENTINELS,
                                                                                   random.Random(3))
    assert span_corruption(tokens, SENTINELS, random.Random(3)) != span_corruption(tokens, SENTINELS,
                                                                                   random.Random(4))


def test_fewer_than_two_tokens_are_left_as_they_are():
    assert span_corruption([], SENTINELS, random.Random(0)) == ([], [])
    assert span_corruption([7], SENTINELS, random.Random(0)) == ([7], [])


def test_two_tokens_keep_one_and_drop_one():
    assert span_corruption([7, 8], SENTINELS, random.Random(0)) == ([7, SENTINELS[0]], [SENTINELS[0], 8])


def test_too_few_sentinels_is_a_clear_error():
    with pytest.raises(LmlabError, match="need 10 sentinels but only 3"):
        span_corruption(list(range(200)), SENTINELS[:3], random.Random(0))


@pytest.mark.parametrize("density, mean", [(0.0, 3.0), (1.0, 3.0), (0.15, 0.5)])
def test_out_of_range_settings_are_a_clear_error(density, mean):
    with pytest.raises(LmlabError, match="must be"):
        span_corruption(list(range(50)), SENTINELS, random.Random(0), density, mean)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4000), st.floats(0.05, 0.5), st.floats(1.0, 8.0))
def test_raw_length_inputs_fit_and_one_more_token_would_not(input_length, density, mean):
    raw, target_len = span_corruption_raw_length(input_length, density, mean)
    inputs_len, targets_len = span_corruption_lengths(raw, density, mean)
    assert inputs_len <= input_length and targets_len == target_len
    assert span_corruption_lengths(raw + 1, density, mean)[0] > input_length


def test_raw_length_matches_t5_for_512_encoder_positions():
    raw, target_len = span_corruption_raw_length(512 - 1)  # one position for eos
    assert (raw, target_len + 1) == (568, 114)  # the lengths T5's random_spans_helper gives for its 512 inputs


def test_sentinel_token_names_are_t5s():
    names = t5_sentinel_tokens()
    assert len(names) == 100 and names[0] == "<extra_id_0>" and names[99] == "<extra_id_99>"
    assert t5_sentinel_tokens(3) == ["<extra_id_0>", "<extra_id_1>", "<extra_id_2>"]

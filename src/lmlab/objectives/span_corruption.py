"""T5 span corruption: drop spans of tokens from the input, each replaced by one sentinel, and make
the decoder write the dropped spans back, each behind its sentinel.

    tokens   a b c d e f g h i j
    inputs   a b <X> e f g <Y> j ...      (each noise span -> the next sentinel)
    targets  <X> c d <Y> h i ...          (sentinel_k then span_k, for every span)

The counts depend only on the length: n_noise = round(length * noise_density) tokens (at least 1,
at most length - 1) in n_spans = round(n_noise / mean_span_length) spans (at least 1). The noise
tokens and the kept tokens are each cut into n_spans segments of random lengths (every composition
equally likely, every segment non-empty), then interleaved kept, noise, kept, noise, ... so the
sequence starts with kept tokens and ends with a noise span, as in T5's own preprocessing. The
targets therefore end with the last span, not with a sentinel; the caller appends eos to both
inputs and targets. Targets are short (about density + density / mean of the length), which is
what makes this objective cheaper than a full denoising one.
"""

import random
from collections.abc import Sequence

from lmlab.errors import LmlabError
from lmlab.objectives.objective import Key, Objective, Tokens, python_rng
from lmlab.objectives.span_noise import SpanNoise, check_span_noise

T5_SENTINELS = 100


def t5_sentinel_tokens(n: int = T5_SENTINELS) -> list[str]:
    """The sentinel token strings a T5 tokenizer must have, `<extra_id_0>` .. `<extra_id_{n-1}>`,
    in the order spans use them."""
    return [f"<extra_id_{k}>" for k in range(n)]


def noise_counts(length: int, noise_density: float = 0.15, mean_span_length: float = 3.0) -> tuple[int, int]:
    """(n_noise, n_spans) for a sequence of `length` tokens; (0, 0) below 2 tokens, where nothing can
    be dropped while keeping a token."""
    check_span_noise(noise_density, mean_span_length)
    if length < 2:
        return 0, 0
    n_noise = min(max(round(length * noise_density), 1), length - 1)
    n_spans = max(round(n_noise / mean_span_length), 1)  # at most n_noise, as mean_span_length >= 1
    return n_noise, min(n_spans, length - n_noise)  # room for a non-empty kept segment before each span


def span_corruption_lengths(length: int, noise_density: float = 0.15,
                            mean_span_length: float = 3.0) -> tuple[int, int]:
    """(input_len, target_len) that `span_corruption` gives for `length` raw tokens, eos not counted:
    each span costs one sentinel in the inputs and one in the targets."""
    n_noise, n_spans = noise_counts(length, noise_density, mean_span_length)
    return length - n_noise + n_spans, n_noise + n_spans


def span_corruption_raw_length(input_length: int, noise_density: float = 0.15,
                               mean_span_length: float = 3.0) -> tuple[int, int]:
    """(raw_length, target_len): the most raw tokens whose corrupted inputs fit in `input_length`
    (eos not counted), and the targets' length then. Pack raw text in chunks of raw_length to fill
    the encoder exactly (T5 reads 568 raw tokens for 512 encoder positions including eos)."""
    if input_length < 1:
        raise LmlabError(f"input_length {input_length} must be at least 1")
    raw = input_length  # inputs are never longer than the raw tokens, so this one fits
    while span_corruption_lengths(raw + 1, noise_density, mean_span_length)[0] <= input_length:
        raw += 1
    return raw, span_corruption_lengths(raw, noise_density, mean_span_length)[1]


def random_segmentation(n_items: int, n_segments: int, rng: random.Random) -> list[int]:
    """Lengths of `n_segments` non-empty segments summing to `n_items`, uniform over all such
    compositions: n_segments - 1 distinct cut points among the n_items - 1 gaps."""
    cuts = sorted(rng.sample(range(1, n_items), n_segments - 1))
    bounds = [0] + cuts + [n_items]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def noise_spans(length: int, rng: random.Random, noise_density: float = 0.15,
                mean_span_length: float = 3.0) -> list[tuple[int, int]]:
    """(start, end) of each noise span, in order: kept and noise segments interleaved, kept first."""
    n_noise, n_spans = noise_counts(length, noise_density, mean_span_length)
    if n_spans == 0:
        return []
    noise = random_segmentation(n_noise, n_spans, rng)
    kept = random_segmentation(length - n_noise, n_spans, rng)
    spans, position = [], 0
    for kept_len, noise_len in zip(kept, noise):
        position += kept_len
        spans.append((position, position + noise_len))
        position += noise_len
    return spans


def span_corruption(tokens: list[int], sentinel_ids: Sequence[int], rng: random.Random,
                    noise_density: float = 0.15, mean_span_length: float = 3.0) -> tuple[list[int], list[int]]:
    """T5's pre-training pair (inputs, targets) for one sequence, without eos (append it to both).

    inputs: tokens with noise span k replaced by sentinel_ids[k]; targets: sentinel_ids[k] followed
    by span k, for every span. Fewer than 2 tokens: (tokens, []), nothing to corrupt.
    """
    spans = noise_spans(len(tokens), rng, noise_density, mean_span_length)
    if len(spans) > len(sentinel_ids):
        raise LmlabError(f"{len(tokens)} tokens need {len(spans)} sentinels but only {len(sentinel_ids)} were "
                         f"given; pass more sentinel ids or shorter sequences")
    inputs, targets, kept_from = [], [], 0
    for sentinel, (start, end) in zip(sentinel_ids, spans):
        inputs += tokens[kept_from:start] + [sentinel]
        targets += [sentinel] + tokens[start:end]
        kept_from = end
    inputs += tokens[kept_from:]
    return inputs, targets


def span_corruption_objective(tokenizer, noise: SpanNoise = SpanNoise()) -> Objective:
    """`span_corruption` bound to a tokenizer holding `t5_sentinel_tokens()` and to `noise`:
    objective(tokens, key) -> (inputs, targets), the spans drawn from the key's rng."""
    sentinels = [tokenizer.token_to_id(t) for t in t5_sentinel_tokens()]

    def objective(tokens: Tokens, key: Key) -> tuple[Tokens, Tokens]:
        return span_corruption(tokens, sentinels, python_rng(key), noise.noise_density, noise.mean_span_length)
    return objective

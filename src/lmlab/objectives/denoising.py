"""BART's denoising objective: corrupt a document with noise functions, and train the encoder-decoder
to write the original back (the decoder sees the whole clean text as its target).

Each noise function has the signature f(tokens, rng, *, options) -> noisy tokens, never changes its
input, and is deterministic given the rng; bind the options with functools.partial and chain them
with `compose`. The five of the BART paper:

    token_masking         random tokens -> <mask> (as BERT, without the 10/10)
    token_deletion        random tokens removed: the model must also find *where* text is missing
    text_infilling        spans of Poisson(3) length -> ONE <mask> each, 0-length spans insert a <mask>:
                          the model must also find *how many* tokens are missing
    sentence_permutation  the sentences shuffled
    document_rotation     the document rotated to start at a random token

The paper's best combination, text infilling on 30 % of the tokens after sentence permutation, is
`bart_default_noise`. Specials (bos/eos) are added by the caller after the noise.
"""

import math
import random
from collections.abc import Callable, Collection
from functools import partial

from lmlab.errors import LmlabError
from lmlab.objectives.objective import Key, Objective, Tokens, python_rng
from lmlab.objectives.sentences import sentence_end_ids, split_sentences
from lmlab.tokenizers.encoder_decoder_bpe import MASK

NoiseFn = Callable[[list[int], random.Random], list[int]]


def _check_ratio(ratio: float) -> None:
    if not 0 <= ratio <= 1:
        raise LmlabError(f"noise ratio {ratio} must be between 0 and 1")


def token_masking(tokens: list[int], rng: random.Random, *, mask_id: int, ratio: float = 0.15) -> list[int]:
    """round(ratio * len) tokens, chosen uniformly, replaced by mask_id."""
    _check_ratio(ratio)
    chosen = set(rng.sample(range(len(tokens)), round(ratio * len(tokens))))
    return [mask_id if i in chosen else t for i, t in enumerate(tokens)]


def token_deletion(tokens: list[int], rng: random.Random, *, ratio: float = 0.15) -> list[int]:
    """round(ratio * len) tokens, chosen uniformly, removed; the others keep their order."""
    _check_ratio(ratio)
    chosen = set(rng.sample(range(len(tokens)), round(ratio * len(tokens))))
    return [t for i, t in enumerate(tokens) if i not in chosen]


def poisson(rng: random.Random, lam: float) -> int:
    """One draw of Poisson(lam): the number of arrivals of a unit-rate Poisson process in time lam
    (exact, no exp(-lam) underflow for large lam)."""
    count, time = 0, rng.expovariate(1.0)
    while time <= lam:
        count += 1
        time += rng.expovariate(1.0)
    return count


def infilling_spans(length: int, rng: random.Random, *, ratio: float = 0.3,
                    poisson_lambda: float = 3.0) -> list[tuple[int, int]]:
    """(start, span length) of the text-infilling spans of a `length`-token document, in order.

    Span lengths are drawn from Poisson(lambda) until they cover ceil(ratio * length) tokens (the
    last one cut to the budget); the spans are then placed among the kept tokens with every
    arrangement of the gaps equally likely. 0-length spans are insertion points.
    """
    _check_ratio(ratio)
    if poisson_lambda <= 0:
        raise LmlabError(f"poisson_lambda {poisson_lambda} must be positive (BART uses 3.0)")
    budget, lengths, covered = math.ceil(ratio * length), [], 0
    while covered < budget:
        lengths.append(min(poisson(rng, poisson_lambda), budget - covered))
        covered += lengths[-1]
    free = length - budget  # kept tokens, cut into len(lengths) + 1 gaps, each possibly empty
    slots = sorted(rng.sample(range(free + len(lengths)), len(lengths)))  # stars and bars
    spans, position = [], 0
    for k, (slot, span_len) in enumerate(zip(slots, lengths)):
        position += slot - (slots[k - 1] + 1 if k else 0)  # the gap before this span
        spans.append((position, span_len))
        position += span_len
    return spans


def text_infilling(tokens: list[int], rng: random.Random, *, mask_id: int, ratio: float = 0.3,
                   poisson_lambda: float = 3.0) -> list[int]:
    """Each span of `infilling_spans` replaced by one mask_id (a 0-length span inserts one)."""
    noisy, kept_from = [], 0
    for start, span_len in infilling_spans(len(tokens), rng, ratio=ratio, poisson_lambda=poisson_lambda):
        noisy += tokens[kept_from:start] + [mask_id]
        kept_from = start + span_len
    return noisy + tokens[kept_from:]


def sentence_permutation(tokens: list[int], rng: random.Random, *, sentence_end_ids: Collection[int]) -> list[int]:
    """The sentences of `split_sentences`, shuffled uniformly and joined again."""
    sentences = split_sentences(tokens, sentence_end_ids)
    rng.shuffle(sentences)
    return [t for sentence in sentences for t in sentence]


def document_rotation(tokens: list[int], rng: random.Random) -> list[int]:
    """The document rotated so that a uniformly chosen token comes first (the model must find the
    start of the document)."""
    if not tokens:
        return []
    start = rng.randrange(len(tokens))
    return tokens[start:] + tokens[:start]


def compose(*noise_fns: NoiseFn) -> NoiseFn:
    """One noise function applying `noise_fns` left to right, all drawing from the same rng."""
    def composed(tokens: list[int], rng: random.Random) -> list[int]:
        for noise in noise_fns:
            tokens = noise(tokens, rng)
        return list(tokens)
    return composed


def bart_default_noise(mask_id: int, sentence_end_ids: Collection[int]) -> NoiseFn:
    """BART's pre-training noise: sentence permutation, then text infilling of 30 % of the tokens
    with Poisson(3) span lengths (permuting first keeps the sentence ends that infilling may hide)."""
    return compose(partial(sentence_permutation, sentence_end_ids=sentence_end_ids),
                   partial(text_infilling, mask_id=mask_id, ratio=0.3, poisson_lambda=3.0))


def bart_denoising(tokens: list[int], rng: random.Random, noise: NoiseFn) -> tuple[list[int], list[int]]:
    """BART's training pair: (noise(tokens), tokens), the clean document as the decoder's target."""
    return noise(tokens, rng), list(tokens)


def denoising_objective(tokenizer) -> Objective:
    """`bart_denoising` with `bart_default_noise`, bound to a tokenizer holding <mask> (and the
    sentence ends it has): objective(tokens, key) -> (noisy tokens, tokens), noise from the key's rng."""
    noise = bart_default_noise(tokenizer.token_to_id(MASK), sentence_end_ids(tokenizer))

    def objective(tokens: Tokens, key: Key) -> tuple[Tokens, Tokens]:
        return bart_denoising(tokens, python_rng(key), noise)
    return objective

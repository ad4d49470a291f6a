"""Training word2vec: skip-gram or CBOW with negative sampling, on CPU.

Read top to bottom: lower-cased sentences of words -> vocabulary (min count) -> one
array of word ids -> per epoch and chunk of text: subsample frequent words, then train on the
chunk with a learning rate that decays linearly over the run -> word vectors (the input embeddings).

A chunk is trained by the C++ loop of `models/word2vec/training.cpp`, one example at a time as the
original tool and gensim do (each centre's dynamic window and negatives drawn there). Where lmlab's
compiled libraries cannot build, it falls back to batches built with numpy and one hand-written SGD
step per batch (`models.word2vec.updates`): the same method, about 3x slower, other random draws.
"""

import itertools
import time
from dataclasses import dataclass

import numpy as np
import torch

from lmlab.data.words import WordVocab, build_vocab
from lmlab.models.word2vec.compiled import TRAINER
from lmlab.models.word2vec.config import Word2VecConfig
from lmlab.models.word2vec.sampling import (
    cbow_windows,
    draw_negatives,
    keep_probabilities,
    noise_table,
    skipgram_pairs,
    subsample,
)
from lmlab.models.word2vec.updates import cbow_step, negative_sampling_loss, sgns_step
from lmlab.models.word2vec.vectors import WordVectors
from lmlab.modules.kernels.build import compiled
from lmlab.progress import progress_bar

CHUNK_WORDS = 200_000  # words per chunk of text turned into examples at once (bounds memory)
MIN_LR_RATIO = 1e-4
LOG_EVERY = 50  # steps between loss readings


@dataclass(frozen=True)
class Word2VecRun:
    """The trained vectors and what the run measured: `losses` holds (fraction of the run done, mean
    negative-sampling loss per example) for each chunk of text (every LOG_EVERY batches without C++)."""

    vectors: WordVectors
    corpus_words: int  # words in the text, out-of-vocabulary ones included
    trained_words: int  # in-vocabulary words x epochs (before subsampling)
    seconds: float
    losses: list[tuple[float, float]]


def train_word2vec(sentences: list[list[str]], cfg: Word2VecConfig, show_progress: bool = True) -> Word2VecRun:
    """Train word vectors on `sentences` (lists of words: `lmlab.data.words.corpus_sentences` of the
    documents) with the settings `cfg`."""
    start = time.perf_counter()
    vocab = build_vocab(sentences, cfg.min_count)
    ids, sentence = _word_stream(sentences, vocab)
    counts = np.asarray(vocab.counts, dtype=np.float64)
    counts[0] = 0  # out-of-vocabulary words are dropped from the text, so never drawn as negatives
    keep, noise = keep_probabilities(counts, cfg.subsample), noise_table(counts)
    noise_tensor = torch.from_numpy(noise)

    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    input_ = (torch.rand(len(vocab), cfg.dim) - 0.5) / cfg.dim  # the original tool's initialisation
    output = torch.zeros(len(vocab), cfg.dim)

    total = cfg.epochs * len(ids)
    bar = progress_bar(total, desc=f"word2vec {cfg.method}", disable=not show_progress, unit="word", unit_scale=True)
    ops, losses, done = compiled(TRAINER), [], 0
    for _ in range(cfg.epochs):
        for lo, hi in _chunks(sentence):
            lr_range = tuple(cfg.start_lr * max(MIN_LR_RATIO, 1 - at / total) for at in (done, done + hi - lo))
            if ops is not None:
                kept = [torch.from_numpy(a) for a in subsample(ids[lo:hi], sentence[lo:hi], keep, rng)]
                loss, examples = ops.train_chunk(input_, output, *kept, noise_tensor, cfg.window, cfg.negatives,
                                                 cfg.method == "cbow", *lr_range, int(rng.integers(2**62))).tolist()
                readings = [(done / total, loss / examples)] if examples else []  # none: all subsampled away
            else:
                readings = _train_batches(input_, output, ids[lo:hi], sentence[lo:hi], keep, noise, cfg, rng,
                                          lr_range, done / total, (hi - lo) / total)
            losses += readings
            if losses:
                bar.set_postfix(loss=f"{losses[-1][1]:.3f}", lr=f"{lr_range[1]:.4f}", refresh=False)
            done += hi - lo
            bar.update(hi - lo)
    bar.close()
    return Word2VecRun(vectors=WordVectors(vocab, input_), corpus_words=sum(map(len, sentences)),
                       trained_words=total, seconds=time.perf_counter() - start, losses=losses)


def _train_batches(input_: torch.Tensor, output: torch.Tensor, ids: np.ndarray, sentence: np.ndarray,
                   keep: np.ndarray, noise: np.ndarray, cfg: Word2VecConfig, rng: np.random.Generator,
                   lr_range: tuple[float, float], start: float, share: float) -> list[tuple[float, float]]:
    """Train one chunk in batches (without the C++ trainer), the rate falling linearly across it; return a
    loss reading (fraction of the run done, mean loss of the batch) every LOG_EVERY batches."""
    batches = list(_batches(ids, sentence, keep, noise, cfg, rng))
    readings = []
    for i, batch in enumerate(batches):
        lr = lr_range[0] + (lr_range[1] - lr_range[0]) * i / len(batches)
        score = (sgns_step if cfg.method == "sgns" else cbow_step)(input_, output, *batch, lr)
        if i % LOG_EVERY == 0:
            readings.append((start + share * i / len(batches), float(negative_sampling_loss(score))))
    return readings


def _word_stream(sentences: list[list[str]], vocab: WordVocab) -> tuple[np.ndarray, np.ndarray]:
    """The ids of every in-vocabulary word, in order, and the number of the sentence each is in."""
    lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
    ids = np.array(vocab.encode(list(itertools.chain.from_iterable(sentences))), dtype=np.int64)
    sentence = np.repeat(np.arange(len(sentences)), lengths)
    known = ids != 0
    return ids[known], sentence[known]


def _chunks(sentence: np.ndarray) -> list[tuple[int, int]]:
    """(lo, hi) ranges of about CHUNK_WORDS words that cut the text only between sentences."""
    starts = np.flatnonzero(np.diff(sentence, prepend=-1))  # first position of each sentence
    cuts = np.unique(starts[np.searchsorted(starts, np.arange(0, len(sentence), CHUNK_WORDS))])
    bounds = [*cuts.tolist(), len(sentence)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def _batches(ids: np.ndarray, sentence: np.ndarray, keep: np.ndarray, noise: np.ndarray, cfg: Word2VecConfig,
             rng: np.random.Generator):
    """The shuffled training examples of one chunk of text, cfg.batch_size at a time, as the arguments
    of `sgns_step` (centres, targets) or `cbow_step` (contexts, mask, targets) before the rate."""
    ids, sentence = subsample(ids, sentence, keep, rng)
    if cfg.method == "sgns":
        centres, contexts = skipgram_pairs(ids, sentence, cfg.window, rng)
        inputs, true = (centres,), contexts
    else:
        true, contexts, mask = cbow_windows(ids, sentence, cfg.window, rng)
        inputs = (contexts, mask.astype(np.float32))
    order = rng.permutation(len(true))
    targets = np.concatenate([true[order, None], draw_negatives(noise, (len(true), cfg.negatives), rng)], axis=1)
    inputs = tuple(torch.from_numpy(np.ascontiguousarray(x[order])) for x in inputs)
    targets = torch.from_numpy(targets)
    for lo in range(0, len(true), cfg.batch_size):
        yield (*(x[lo:lo + cfg.batch_size] for x in inputs), targets[lo:lo + cfg.batch_size])

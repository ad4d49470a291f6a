"""Training an n-gram model on the same tokens and the same validation split as the transformers.

Read top to bottom: documents -> tokenizer (trained BPE or given) -> cached token array -> the
block split of `pretrain` -> count the training blocks -> smooth -> validation perplexity on the
held-out blocks (each block scored on its own, as `mean_block_loss` does) -> a model directory.
"""

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmlab.data.blocks import gather, split_blocks
from lmlab.data.corpora import load_corpus
from lmlab.data.tokens import tokenize_corpus
from lmlab.io.outputs import claim_run_dir
from lmlab.models.ngram.files import save_ngram_dir
from lmlab.models.ngram.fit import check_fit_settings, fit_ngram
from lmlab.models.ngram.model import DEFAULT_CONTEXT_LENGTH, NGramLM
from lmlab.models.ngram.runs import TokenRuns, stream_runs
from lmlab.progress import progress_bar
from lmlab.tokenizers.bpe import load_tokenizer, train_bpe

DEFAULT_VOCAB_SIZE = 8192


@dataclass(frozen=True)
class NGramResult:
    model_dir: Path
    train_tokens: int
    val_tokens: int
    val_perplexity: float | None  # None for stupid backoff, whose scores are not probabilities
    sizes: tuple[int, ...]  # n-grams per order
    count_seconds: float  # counting and smoothing, without tokenization


def train_ngram(data: str, out: str | Path, order: int = 3, smoothing: str = "kn", tokenizer: str | Path | None = None,
                vocab_size: int = DEFAULT_VOCAB_SIZE, discount: float | None = None, k: float = 1.0,
                block_size: int = DEFAULT_CONTEXT_LENGTH, val_fraction: float = 0.05, seed: int = 0,
                show_progress: bool = True) -> NGramResult:
    """Count an order-`order` model of `data` (a path or an embedded corpus name) into `out`/model.

    Tokens and the train/validation split are those of `pretrain` with the same tokenizer,
    `block_size`, `val_fraction` and `seed`, so perplexities compare across architectures.
    """
    check_fit_settings(order, smoothing, vocab_size, discount, k, block_size)
    texts = load_corpus(data)
    backend = load_tokenizer(tokenizer) if tokenizer else train_bpe(texts, vocab_size)
    tokens = tokenize_corpus(texts, backend)
    split = split_blocks(tokens, block_size, val_fraction, seed)
    bar = progress_bar(3, desc="count, validate, save", disable=not show_progress)
    start = time.perf_counter()
    runs = training_runs(tokens, split.train_blocks, block_size)
    model = fit_ngram(runs, order, backend.get_vocab_size(), smoothing, discount, k, block_size)
    seconds = time.perf_counter() - start
    bar.update()
    val = gather(tokens, split.val_blocks, block_size).numpy()  # (B, block_size + 1)
    perplexity = validation_perplexity(model, val) if model.normalized and len(val) else None
    bar.update()
    claim_run_dir(out)
    model_dir = save_ngram_dir(model, backend, Path(out) / "model")
    bar.update()
    bar.close()
    return NGramResult(model_dir, len(runs.tokens), val[:, 1:].size, perplexity, model.tables.sizes, seconds)


def training_runs(tokens: np.ndarray, train_blocks: np.ndarray, block_size: int) -> TokenRuns:
    """The training blocks as runs: blocks that follow one another join into one run, so only the
    gaps left by validation blocks cut n-grams."""
    starts = np.sort(train_blocks)  # (n_train,)
    breaks = np.flatnonzero(np.diff(starts) != block_size) + 1
    first = np.concatenate([[0], breaks])  # index of each run's first block
    last = np.concatenate([breaks - 1, [len(starts) - 1]])
    pieces = [np.asarray(tokens[starts[a]: starts[b] + block_size + 1]) for a, b in zip(first, last)]
    offsets = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    return stream_runs(np.concatenate(pieces), offsets)


def validation_perplexity(model: NGramLM, blocks: np.ndarray) -> float:
    """exp of the mean NLL of tokens 1..T of each block (B, T + 1) given the tokens before it in the block."""
    nll = -model.token_log_probs(blocks)[:, 1:]  # (B, T)
    return math.exp(float(nll.mean()))

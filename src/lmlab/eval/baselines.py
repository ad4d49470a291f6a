"""Reference points for a language model's perplexity: what counting alone achieves."""

import math

import numpy as np


def unigram_perplexity(train_tokens: np.ndarray, eval_tokens: np.ndarray, vocab_size: int) -> float:
    """Perplexity on `eval_tokens` of the add-one-smoothed unigram model counted on `train_tokens`.

    A model that ignores context entirely; anything trained should beat it.
    """
    counts = np.bincount(np.asarray(train_tokens, dtype=np.int64), minlength=vocab_size) + 1.0
    log_probs = np.log(counts / counts.sum())
    scored = np.asarray(eval_tokens[1:], dtype=np.int64)  # the first token is not scored, as in `perplexity`
    return math.exp(-log_probs[scored].mean())

"""Count and estimate in one call: token runs + order + smoothing -> an `NGramLM`."""

from lmlab.errors import LmlabError
from lmlab.models.ngram.add_k import add_k
from lmlab.models.ngram.counts import count_ngrams
from lmlab.models.ngram.kneser_ney import kn_discounts, kneser_ney, modified_kn_discounts_per_order
from lmlab.models.ngram.maximum_likelihood import maximum_likelihood
from lmlab.models.ngram.model import DEFAULT_CONTEXT_LENGTH, NGramConfig, NGramLM
from lmlab.models.ngram.runs import TokenRuns
from lmlab.models.ngram.stupid_backoff import stupid_backoff


def check_fit_settings(order: int, smoothing: str, vocab_size: int, discount: float | None, k: float,
                       context_length: int) -> NGramConfig:
    """The settings' config, or one clear error: call it before any slow work (tokenizing a corpus)."""
    config = NGramConfig(order, smoothing, vocab_size, context_length=context_length)
    if smoothing == "arpa":
        raise LmlabError("smoothing 'arpa' is for models read from an ARPA file; choose kn, mkn, addk, mle or stupid")
    if discount is not None and smoothing != "kn":
        raise LmlabError(f"a fixed discount is for --smoothing kn, not {smoothing}; drop --discount")
    if discount is not None and not 0 < discount <= 1:
        raise LmlabError(f"discount {discount} must lie in (0, 1]; Kneser-Ney subtracts it from counts of 1")
    if smoothing == "addk" and not k > 0:
        raise LmlabError(f"add-k needs k > 0, got {k}; use 1 for Laplace smoothing")
    return config


def fit_ngram(runs: TokenRuns, order: int, vocab_size: int, smoothing: str = "kn", discount: float | None = None,
              k: float = 1.0, context_length: int = DEFAULT_CONTEXT_LENGTH) -> NGramLM:
    """An order-`order` model of `runs` with `smoothing` (kn, mkn, addk, mle, stupid). `discount` fixes
    KN's D for every order (default: estimated per order); `k` is add-k's pseudo-count."""
    config = check_fit_settings(order, smoothing, vocab_size, discount, k, context_length)
    counts = count_ngrams(runs, order, vocab_size)
    if smoothing in ("kn", "mkn"):
        if discount is not None:
            discounts = ((discount,),) * order
        else:
            discounts = kn_discounts(counts) if smoothing == "kn" else modified_kn_discounts_per_order(counts)
        tables = kneser_ney(counts, discounts)
        config = NGramConfig(order, smoothing, vocab_size, discounts=discounts, context_length=context_length)
    elif smoothing == "addk":
        tables = add_k(counts, k)
        config = NGramConfig(order, smoothing, vocab_size, add_k=k, context_length=context_length)
    elif smoothing == "mle":
        tables = maximum_likelihood(counts)
    else:
        tables = stupid_backoff(counts)
    return NGramLM(config, tables)

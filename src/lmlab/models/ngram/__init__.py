"""N-gram language models: counting, smoothing (MLE, add-k, Kneser-Ney, modified KN, stupid backoff),
backoff scoring, and the `StatefulLM` interface. ARPA files are read and written by `lmlab.models.ngram.arpa`."""

from importlib import import_module

# name -> the module it lives in: imported on first use, so that `lmlab.models.ngram.smoothings` (what the
# CLI's parsers read) loads without torch
_EXPORTS = {
    **dict.fromkeys(("NGramCounts", "count_ngrams", "counts_of_counts"), "lmlab.models.ngram.counts"),
    "fit_ngram": "lmlab.models.ngram.fit",
    **dict.fromkeys(("NGramConfig", "NGramLM"), "lmlab.models.ngram.model"),
    "SMOOTHINGS": "lmlab.models.ngram.smoothings",
    **dict.fromkeys(("TokenRuns", "sentence_runs", "stream_runs"), "lmlab.models.ngram.runs"),
    "BackoffTables": "lmlab.models.ngram.tables",
    "Vocabulary": "lmlab.models.ngram.vocabulary",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lmlab.models.ngram' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)

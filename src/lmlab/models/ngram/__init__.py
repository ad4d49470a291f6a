"""N-gram language models: counting, smoothing (MLE, add-k, Kneser-Ney, modified KN, stupid backoff),
backoff scoring, and the `StatefulLM` interface. ARPA files are read and written by `lmlab.models.ngram.arpa`."""

from lmlab.lazy import lazy_exports

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
__getattr__ = lazy_exports(__name__, _EXPORTS)

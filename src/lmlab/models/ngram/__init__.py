"""N-gram language models: counting, smoothing (MLE, add-k, Kneser-Ney, modified KN, stupid backoff),
backoff scoring, and the `StatefulLM` interface. ARPA files are read and written by `lmlab.models.ngram.arpa`."""

from lmlab.models.ngram.counts import NGramCounts, count_ngrams, counts_of_counts
from lmlab.models.ngram.fit import fit_ngram
from lmlab.models.ngram.model import SMOOTHINGS, NGramConfig, NGramLM
from lmlab.models.ngram.runs import TokenRuns, sentence_runs, stream_runs
from lmlab.models.ngram.tables import BackoffTables
from lmlab.models.ngram.vocabulary import Vocabulary

__all__ = ["BackoffTables", "NGramConfig", "NGramCounts", "NGramLM", "SMOOTHINGS", "TokenRuns", "Vocabulary",
           "count_ngrams", "counts_of_counts", "fit_ngram", "sentence_runs", "stream_runs"]

"""Named corpora that need no download, and the dispatch from a `--data` argument to texts."""

from lmlab.data.analogies import analogy_corpus
from lmlab.data.kjv import kjv_texts
from lmlab.data.number_words import number_corpus
from lmlab.data.sources import read_texts
from lmlab.data.stdlib import stdlib_texts

EMBEDDED = {
    "markov": "text sampled from a Markov chain over made-up words; its true entropy is known exactly",
    "stdlib": "the Python standard library's own source files (real text every Python install carries)",
    "analogies": "sentences from a grammar of countries, capitals, roles, plurals and tenses; word analogies hold",
    "numbers": "sentences about counts of things, each number written out in words or in digits (never both)",
    "kjv": "real English: the King James Bible's 64 training books, one document each (apt-get install bible-kjv)",
    "kjv-held-out": "the King James Bible's held-out books, Esther and Matthew, never in kjv",
}
MARKOV_TRAIN_DOCS = 20000
MARKOV_TRAIN_SEED = 0
MARKOV_HELD_OUT_SEED = 12345  # held-out documents from the same source, scored against their surprisal
ANALOGY_TRAIN_SENTENCES = 60000
NUMBER_DOCS = 4000


def load_corpus(data: str) -> list[str]:
    """Documents for `--data`: an embedded corpus name (see EMBEDDED) or a file/directory/JSONL path."""
    if data == "markov":
        from lmlab.data.markov import markov_corpus  # numpy: imported when sampled, not for EMBEDDED's names

        return markov_corpus(MARKOV_TRAIN_DOCS, seed=MARKOV_TRAIN_SEED)[0]
    if data == "analogies":
        return analogy_corpus(ANALOGY_TRAIN_SENTENCES, seed=0)
    if data == "numbers":
        return number_corpus(NUMBER_DOCS, seed=0)
    if data == "stdlib":
        return stdlib_texts()
    if data in ("kjv", "kjv-held-out"):
        return kjv_texts(held_out=data == "kjv-held-out")
    return read_texts(data)

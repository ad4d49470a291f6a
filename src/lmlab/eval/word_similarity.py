"""Word similarity of word vectors against human judgements (WordSim-353, SimLex-999 and the like).

A benchmark is a file of "word1 word2 score" lines (tab- or space-separated; "#" lines are comments): people
rated how similar or related the two words are. The vectors' cosine for each pair is compared with the
ratings by Spearman's rank correlation (and Pearson's, as gensim's `evaluate_word_pairs` reports both). Pairs
with a word outside the vocabulary are skipped and counted, as gensim does by default; words are lower-cased.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmlab.errors import LmlabError
from lmlab.eval.metrics import pearson, spearman
from lmlab.io.lines import read_text
from lmlab.models.word2vec.vectors import WordVectors


@dataclass(frozen=True)
class PairScore:
    spearman: float
    pearson: float
    pairs: int  # scored: both words in the vocabulary
    skipped: int  # a word outside the vocabulary

    def to_dict(self) -> dict:
        return {"spearman": self.spearman, "pearson": self.pearson, "pairs": self.pairs, "skipped": self.skipped}


def read_pairs(path: str | Path) -> list[tuple[str, str, float]]:
    """(word1, word2, human score) for each line of a word-similarity file."""
    pairs = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        try:
            first, second, score = fields[0].strip().lower(), fields[1].strip().lower(), float(fields[2])
        except (IndexError, ValueError):
            raise LmlabError(f"{path}:{number} is not 'word1 word2 score' (tab- or space-separated)") from None
        pairs.append((first, second, score))
    if not pairs:
        raise LmlabError(f"{path} holds no word pairs; write one 'word1 word2 score' line per pair")
    return pairs


def pair_similarity(vectors: WordVectors, pairs: list[tuple[str, str, float]]) -> PairScore:
    """Spearman's and Pearson's correlation of the cosines with the human scores (`eval.metrics`), over the
    pairs whose two words the vocabulary holds (nan when fewer than two pairs can be scored)."""
    vocab = vectors.vocab
    known = [(a, b, s) for a, b, s in pairs if all(w in vocab and vocab.id(w) != 0 for w in (a, b))]
    if len(known) < 2:
        return PairScore(float("nan"), float("nan"), len(known), len(pairs) - len(known))
    first = vectors.unit[[vocab.id(a) for a, _, _ in known]].numpy()  # (P, D), float32 as gensim computes them
    second = vectors.unit[[vocab.id(b) for _, b, _ in known]].numpy()
    cosines = (first * second).sum(axis=1).astype(np.float64)  # (P,)
    humans = [s for _, _, s in known]
    return PairScore(spearman(cosines, humans), pearson(cosines, humans), len(known), len(pairs) - len(known))

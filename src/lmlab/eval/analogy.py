"""Analogy accuracy of word vectors (Mikolov et al. 2013): for each question "a b c d", is d the
word nearest to b - a + c (3CosAdd on unit vectors, the three question words left out)?

Questions come in the usual text format: "a b c d" lines, lower-cased on reading, grouped by
": section" header lines. A question with a word outside the vocabulary cannot be asked; it is
counted as skipped, and accuracy is over the questions asked, as gensim and the original tool do.
"""

from dataclasses import dataclass
from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.io.lines import read_text
from lmlab.models.word2vec.vectors import WordVectors

NO_SECTION = "questions"
CHUNK = 1024  # questions scored at once: (CHUNK, V) cosines


@dataclass(frozen=True)
class SectionScore:
    correct: int
    asked: int
    skipped: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.asked if self.asked else 0.0


@dataclass(frozen=True)
class AnalogyScore:
    """The score per section and over all questions."""

    sections: dict[str, SectionScore]

    @property
    def total(self) -> SectionScore:
        return SectionScore(*(sum(getattr(s, f) for s in self.sections.values()) for f in ("correct", "asked",
                                                                                             "skipped")))

    def to_dict(self) -> dict:
        rows = {name: s for name, s in self.sections.items()} | {"total": self.total}
        return {name: {"accuracy": s.accuracy, "correct": s.correct, "asked": s.asked, "skipped": s.skipped}
                for name, s in rows.items()}


def parse_questions(text: str, source: str) -> list[tuple[str, str, str, str, str]]:
    """(section, a, b, c, d) for each question line of `text`; `source` names it in errors."""
    questions, section = [], NO_SECTION
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        if line.startswith(":"):
            section = line[1:].strip() or NO_SECTION
            continue
        words = line.lower().split()
        if len(words) != 4:
            raise LmlabError(f"{source}:{number} has {len(words)} words; each question line must be 'a b c d' "
                             "(a is to b as c is to d), or ': section'")
        questions.append((section, *words))
    if not questions:
        raise LmlabError(f"{source} holds no questions; write one 'a b c d' line per question")
    return questions


def read_questions(path: str | Path) -> list[tuple[str, str, str, str, str]]:
    """The questions in a file of the usual format."""
    return parse_questions(read_text(path), str(path))  # read_text: one line naming what is wrong, and where


def analogy_accuracy(vectors: WordVectors, questions: list[tuple[str, str, str, str, str]]) -> AnalogyScore:
    """Score every question whose four words are in the vocabulary; the others are skipped."""
    vocab = vectors.vocab
    known = [q for q in questions if all(w in vocab and vocab.id(w) != 0 for w in q[1:])]
    correct = torch.zeros(len(known), dtype=torch.bool)
    ids = torch.tensor([[vocab.id(w) for w in q[1:]] for q in known], dtype=torch.long).reshape(-1, 4)
    unit = vectors.unit
    for start in range(0, len(known), CHUNK):
        a, b, c, d = ids[start:start + CHUNK].unbind(1)
        cosines = (unit[b] - unit[a] + unit[c]) @ unit.T  # (Q, V); the query's length does not change argmax
        rows = torch.arange(len(a))
        cosines[:, 0] = -torch.inf
        for excluded in (a, b, c):
            cosines[rows, excluded] = -torch.inf
        correct[start:start + CHUNK] = cosines.argmax(1) == d
    sections: dict[str, list[int]] = {}
    for q in questions:
        sections.setdefault(q[0], [0, 0, 0])
    for q, ok in zip(known, correct.tolist()):
        sections[q[0]][0] += ok
        sections[q[0]][1] += 1
    for name, counts in sections.items():
        counts[2] = sum(q[0] == name for q in questions) - counts[1]
    return AnalogyScore({name: SectionScore(*counts) for name, counts in sections.items()})

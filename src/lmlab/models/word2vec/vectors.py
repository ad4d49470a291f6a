"""Trained word vectors: nearest neighbours, similarity and analogies by cosine, and their files.

A model directory holds vectors.safetensors (one (V, D) tensor "vectors"), vocab.txt ("word count"
per line, in id order, <unk> first) and config.json (the training settings). The <unk> row is never
returned as an answer. `export_word2vec` and `import_word2vec` convert to and from the word2vec file
format (`lmlab.io.word2vec_format`) that gensim and the original C tool read.
"""

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from lmlab.data.words import UNK, WordVocab, parse_vocab_text, save_vocab_text
from lmlab.errors import LmlabError
from lmlab.io.word2vec_format import read_word2vec, write_word2vec

VECTORS_FILE, VOCAB_FILE, CONFIG_FILE = "vectors.safetensors", "vocab.txt", "config.json"
MODEL_TYPE = "word2vec"


@dataclass(frozen=True, eq=False)
class WordVectors:
    """One vector per vocabulary word: vectors (V, D), row i for vocab.words[i]."""

    vocab: WordVocab
    vectors: torch.Tensor

    @cached_property
    def unit(self) -> torch.Tensor:
        """The vectors scaled to length 1 (V, D), so that a dot product is a cosine."""
        return F.normalize(self.vectors.float(), dim=1)

    def id(self, word: str) -> int:
        """The id of `word`; an unknown word is an LmlabError naming it."""
        if word not in self.vocab or word == self.vocab.words[0]:
            raise LmlabError(f"'{word}' is not in the vocabulary ({len(self.vocab) - 1} words, those seen at "
                             "least --min-count times, lower-cased); try another word")
        return self.vocab.id(word)

    def similarity(self, first: str, second: str) -> float:
        """Cosine similarity of two words' vectors."""
        return float(self.unit[self.id(first)] @ self.unit[self.id(second)])

    def nearest(self, query: torch.Tensor, k: int, exclude: list[int] = ()) -> list[tuple[str, float]]:
        """The k words whose vectors have the highest cosine with `query` (D,), leaving out `exclude` ids."""
        cosines = self.unit @ F.normalize(query.float(), dim=0)  # (V,)
        cosines[[0, *exclude]] = -torch.inf
        top = torch.topk(cosines, min(k, len(cosines) - 1 - len(set(exclude))))
        return [(self.vocab.words[i], float(c)) for c, i in zip(top.values, top.indices)]

    def neighbors(self, word: str, k: int = 10) -> list[tuple[str, float]]:
        """The k nearest words to `word` by cosine, itself left out."""
        i = self.id(word)
        return self.nearest(self.unit[i], k, exclude=[i])

    def analogy(self, a: str, b: str, c: str, k: int = 1) -> list[tuple[str, float]]:
        """"a is to b as c is to ?": the k words nearest to b - a + c (unit vectors; 3CosAdd), the three
        question words left out."""
        ia, ib, ic = self.id(a), self.id(b), self.id(c)
        return self.nearest(self.unit[ib] - self.unit[ia] + self.unit[ic], k, exclude=[ia, ib, ic])


def save_vectors(vectors: WordVectors, directory: Path, config: dict) -> None:
    """Write the three files of a model directory into `directory` (which the caller renames into place)."""
    directory.mkdir(parents=True, exist_ok=True)
    save_file({"vectors": vectors.vectors.contiguous()}, str(directory / VECTORS_FILE))
    (directory / VOCAB_FILE).write_text(save_vocab_text(vectors.vocab), encoding="utf-8")
    (directory / CONFIG_FILE).write_text(json.dumps({"model_type": MODEL_TYPE, **config}, indent=2) + "\n")


def export_word2vec(vectors: WordVectors, path: Path, binary: bool = False) -> None:
    """Write `vectors` as a word2vec file (text, or binary float32), every word but <unk>, most frequent first."""
    write_word2vec(path, list(vectors.vocab.words[1:]), vectors.vectors[1:].float().numpy(), binary)


def import_word2vec(path: Path) -> WordVectors:
    """Word vectors from a word2vec file (text or binary), in the file's order after a zero <unk> row. The
    file has no counts, so every word's count is 0."""
    words, matrix = read_word2vec(path)  # (V, D)
    if UNK in words:
        raise LmlabError(f"'{path}' has a row for {UNK}, which lmlab keeps for unknown words; remove that row")
    vocab = WordVocab(words=(UNK, *words), counts=(0,) * (len(words) + 1))
    rows = torch.cat([torch.zeros(1, matrix.shape[1]), torch.from_numpy(matrix)])  # (V + 1, D)
    return WordVectors(vocab=vocab, vectors=rows)


def is_model_dir(directory: Path) -> bool:
    """Whether `directory` holds a saved word2vec model (and so may be overwritten by a new one)."""
    try:
        return json.loads((directory / CONFIG_FILE).read_text()).get("model_type") == MODEL_TYPE
    except (OSError, ValueError, RecursionError, AttributeError):
        return False


def load_vectors(directory: str | Path) -> WordVectors:
    """Read a model directory written by `lmlab word2vec train`."""
    directory = Path(directory)
    if not is_model_dir(directory):
        raise LmlabError(f"'{directory}' is not a word2vec model directory (no {CONFIG_FILE} with model_type "
                         f"'{MODEL_TYPE}'); pass the --out of `lmlab word2vec train`")
    try:
        matrix = load_file(str(directory / VECTORS_FILE))["vectors"]
        vocab = parse_vocab_text((directory / VOCAB_FILE).read_text(encoding="utf-8"), str(directory / VOCAB_FILE))
    except (OSError, KeyError) as e:
        raise LmlabError(f"'{directory}' is missing or has a damaged {VECTORS_FILE} or {VOCAB_FILE} ({e}); "
                         "train the model again") from None
    if matrix.shape[0] != len(vocab):
        raise LmlabError(f"'{directory}': {VECTORS_FILE} has {matrix.shape[0]} rows but {VOCAB_FILE} "
                         f"{len(vocab)} words; train the model again")
    return WordVectors(vocab=vocab, vectors=matrix)

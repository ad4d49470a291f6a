"""A retrieval index on disk: passages and their unit-length sentence embeddings, never a pickle.

An index is a directory that lmlab writes whole (atomically):

    index.json               {"format": "lmlab-rag-index-1", "encoder", "dim", "passages", "max_words", "overlap"}
    passages.jsonl           one {"text", "source", "position"} per passage, in the order of the rows
    embeddings.safetensors   "embeddings": (passages, dim) float32, each row of length 1

It comes from anyone, so `load_index` checks it before use: the format, the sizes (at most
MAX_PASSAGES rows; the header's shape against index.json and the passages), the tensor's type, and
that every row is finite and of length 1. Each problem is one line naming the file.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from lmlab.errors import LmlabError
from lmlab.inference.embeddings import sentence_embeddings
from lmlab.io.atomic import atomic_path
from lmlab.io.json_file import read_json_object
from lmlab.io.lines import json_objects
from lmlab.rag.passages import Passage

FORMAT = "lmlab-rag-index-1"
MAX_PASSAGES = 50_000_000  # rows an index may say it holds (150 GB of 768-dim float32): past it, a corrupt file
MAX_DIM = 16_384
UNIT_TOLERANCE = 1e-3  # how far a row's length may be from 1
REBUILD = "rebuild it with lmlab rag index"


@dataclass(frozen=True)
class Index:
    """Passages, their embeddings (N, dim) by `encoder` (the zoo name or path that made them) and the
    passage sizes they were cut with."""

    passages: tuple[Passage, ...]
    embeddings: torch.Tensor  # (N, dim) float32, unit rows
    encoder: str
    max_words: int
    overlap: int


def build_index(encoder, tokenizer, passages: list[Passage], encoder_name: str, max_words: int, overlap: int,
                batch_size: int = 32, show_progress: bool = False) -> Index:
    """Embed every passage with the sentence encoder (`show_progress`: a bar with an ETA on stderr)."""
    if not passages:
        raise LmlabError("the corpus gave no passages; pass text to index")
    vectors = sentence_embeddings(encoder, tokenizer, [p.text for p in passages], batch_size, show_progress)
    return Index(tuple(passages), vectors.float().cpu().contiguous(), encoder_name, max_words, overlap)


def save_index(index: Index, directory: str | Path) -> Path:
    """Write `index` as the directory `directory`, whole or not at all."""
    meta = {"format": FORMAT, "encoder": index.encoder, "dim": index.embeddings.shape[1],
            "passages": len(index.passages), "max_words": index.max_words, "overlap": index.overlap}
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        (tmp / "index.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        with open(tmp / "passages.jsonl", "w", encoding="utf-8") as f:
            for p in index.passages:
                f.write(json.dumps({"text": p.text, "source": p.source, "position": p.position},
                                   ensure_ascii=False) + "\n")
        save_file({"embeddings": index.embeddings}, tmp / "embeddings.safetensors")
    return Path(directory)


def load_index(directory: str | Path) -> Index:
    """The index in `directory`, checked (see the module's docstring)."""
    directory = Path(directory)
    if not (directory / "index.json").is_file():
        raise LmlabError(f"'{directory}' is not an lmlab retrieval index (no index.json); {REBUILD}")
    meta = read_json_object(directory / "index.json", REBUILD)
    count, dim = _check_meta(meta, directory / "index.json")
    embeddings = _read_embeddings(directory / "embeddings.safetensors", count, dim)
    passages = tuple(_read_passages(directory / "passages.jsonl", count))
    return Index(passages, embeddings, meta["encoder"], meta["max_words"], meta["overlap"])


def _check_meta(meta: dict, path: Path) -> tuple[int, int]:
    """(passages, dim) from index.json, after checking every field."""
    if meta.get("format") != FORMAT:
        raise LmlabError(f"{path} says format {meta.get('format')!r}, not {FORMAT!r}; {REBUILD}")
    ints = {"passages": (1, MAX_PASSAGES), "dim": (1, MAX_DIM), "max_words": (1, 10**6), "overlap": (0, 10**6)}
    for key, (low, high) in ints.items():
        value = meta.get(key)
        if type(value) is not int or not low <= value <= high:
            raise LmlabError(f"{path}: \"{key}\" is {value!r}, not a whole number in {low}..{high}; {REBUILD}")
    if not isinstance(meta.get("encoder"), str) or not meta["encoder"]:
        raise LmlabError(f"{path}: \"encoder\" must name the sentence encoder that made the index; {REBUILD}")
    return meta["passages"], meta["dim"]


def _read_embeddings(path: Path, count: int, dim: int) -> torch.Tensor:
    """The (count, dim) float32 unit rows of embeddings.safetensors; its header is checked before the data is read."""
    try:
        with safe_open(path, framework="pt") as opened:
            names = list(opened.keys())
            if names != ["embeddings"]:
                raise LmlabError(f"{path} holds {names}, not one tensor \"embeddings\"; {REBUILD}")
            stored = opened.get_slice("embeddings")
            if stored.get_dtype() != "F32" or stored.get_shape() != [count, dim]:
                raise LmlabError(f"{path} holds {stored.get_dtype()} {stored.get_shape()}, not F32 [{count}, {dim}] "
                                 f"as index.json says; {REBUILD}")
            vectors = opened.get_tensor("embeddings")
    except (SafetensorError, OSError, RuntimeError) as e:
        raise LmlabError(f"cannot read {path}: {e}; the file is missing, corrupt or truncated; {REBUILD}") from None
    lengths = vectors.norm(dim=1)  # (count,)
    bad = (~torch.isfinite(lengths)) | ((lengths - 1).abs() > UNIT_TOLERANCE)
    if bad.any():
        row = int(bad.nonzero()[0])
        raise LmlabError(f"{path}: row {row} has length {float(lengths[row]):g}, not 1 (every embedding is "
                         f"unit-length); {REBUILD}")
    return vectors


def _read_passages(path: Path, count: int) -> list[Passage]:
    """The `count` passages of passages.jsonl, each checked."""
    hint = f"each line is {{\"text\", \"source\", \"position\"}}; {REBUILD}"
    if not path.is_file():
        raise LmlabError(f"{path} does not exist; {REBUILD}")
    passages = []
    for number, record in json_objects(path, hint):
        text, source, position = record.get("text"), record.get("source"), record.get("position")
        if not (isinstance(text, str) and isinstance(source, str) and type(position) is int):
            raise LmlabError(f"{path}:{number} is not a passage; {hint}")
        if len(passages) == count:
            raise LmlabError(f"{path} holds more than the {count} passages index.json says; {REBUILD}")
        passages.append(Passage(text, source, position))
    if len(passages) != count:
        raise LmlabError(f"{path} holds {len(passages)} passages, index.json says {count}; {REBUILD}")
    return passages

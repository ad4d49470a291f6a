"""(source, target) text pairs from a CSV or JSONL file, for sequence-to-sequence fine-tuning.

Each row needs a `source` and a `target` field (other names: `source_field`, `target_field`),
both non-empty text. A missing field, an empty file or a line that is not valid JSON is an error
naming the file and the line (see `table_files`).
"""

from pathlib import Path

from lmlab.data.pairs import Pair
from lmlab.data.table_files import read_rows
from lmlab.errors import LmlabError


def read_pairs(path: str | Path, source_field: str = "source", target_field: str = "target") -> list[Pair]:
    """Every (source, target) pair of `path`, in file order."""
    pairs = []
    for line, row in read_rows(path):
        for field in (source_field, target_field):
            if field not in row:
                raise LmlabError(f"{path}:{line} has no '{field}' field (it has: {', '.join(map(str, row)) or 'none'});"
                                 f" every row needs '{source_field}' and '{target_field}'")
            if not isinstance(row[field], str) or not row[field].strip():
                raise LmlabError(f"{path}:{line}: '{field}' is {row[field]!r}; it must be non-empty text")
        pairs.append((row[source_field], row[target_field]))
    return pairs

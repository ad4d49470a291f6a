"""Rows of a CSV or JSONL file, each with its line number, for the encoder fine-tuning tasks.

A `.csv` (or `.tsv`) file has a header line naming the columns; a `.jsonl` file holds one JSON
object per line. A line that cannot be read (broken quoting, a wrong number of fields, invalid
JSON, not an object) is an error naming the file and the line. Blank JSONL lines are skipped.
"""

import csv
import json
from pathlib import Path

from lmlab.errors import LmlabError

Row = tuple[int, dict]  # (line number, column -> value)
SUFFIXES = (".csv", ".tsv", ".jsonl")


def read_rows(path: str | Path) -> list[Row]:
    """Every row of `path` with the number of the line it starts on."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise LmlabError(f"'{path}' is neither CSV nor JSONL; name it *.csv, *.tsv or *.jsonl")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LmlabError(f"cannot read '{path}' ({e}); pass a UTF-8 CSV or JSONL file") from None
    rows = _jsonl_rows(path, text) if path.suffix == ".jsonl" else _csv_rows(path, text)
    if not rows:
        raise LmlabError(f"'{path}' holds no examples; pass a file with at least one row")
    return rows


def _jsonl_rows(path: Path, text: str) -> list[Row]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise LmlabError(f"{path}:{number} is not valid JSON ({e.msg}); write one JSON object per line") from None
        if not isinstance(row, dict):
            raise LmlabError(f"{path}:{number} is a JSON {type(row).__name__}, not an object; "
                             "write one {\"column\": value, …} object per line")
        rows.append((number, row))
    return rows


def _csv_rows(path: Path, text: str) -> list[Row]:
    reader = csv.reader(text.splitlines(keepends=True), delimiter="\t" if path.suffix == ".tsv" else ",",
                        strict=True)
    rows, header, start = [], None, 1
    try:
        for fields in reader:
            if header is None:
                header = fields
            elif fields:
                if len(fields) != len(header):
                    raise LmlabError(f"{path}:{start} has {len(fields)} fields but the header has {len(header)} "
                                     f"({', '.join(header)}); quote fields that contain the delimiter")
                rows.append((start, dict(zip(header, fields))))
            start = reader.line_num + 1
    except csv.Error as e:
        raise LmlabError(f"{path}:{start} is not valid CSV ({e}); check its quotes") from None
    return rows

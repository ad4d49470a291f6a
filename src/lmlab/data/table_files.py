"""Rows of a CSV or JSONL file, each with its line number, for the encoder fine-tuning tasks.

A `.csv` (or `.tsv`) file has a header line naming the columns; a `.jsonl` file holds one JSON
object per line. A line that cannot be read (broken quoting, a wrong number of fields, invalid
JSON, not an object, not UTF-8, longer than the line limit of `io.lines`) is an error naming the
file and the line. Blank JSONL lines are skipped. A CSV field may be as long as a line may.
"""

import csv
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.lines import check_fits_in_memory, file_size, json_objects, max_line_bytes, read_lines

Row = tuple[int, dict]  # (line number, column -> value)
SUFFIXES = (".csv", ".tsv", ".jsonl")


def read_rows(path: str | Path) -> list[Row]:
    """Every row of `path` with the number of the line it starts on."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise LmlabError(f"'{path}' is neither CSV nor JSONL; name it *.csv, *.tsv or *.jsonl")
    if not path.is_file():
        raise LmlabError(f"'{path}' does not exist or is not a file; pass a UTF-8 CSV or JSONL file")
    check_fits_in_memory(path, file_size(path))
    rows = _jsonl_rows(path) if path.suffix == ".jsonl" else _csv_rows(path)
    if not rows:
        raise LmlabError(f"'{path}' holds no examples; pass a file with at least one row")
    return rows


def _jsonl_rows(path: Path) -> list[Row]:
    return list(json_objects(path, "write one {\"column\": value, …} object per line"))


def _csv_rows(path: Path) -> list[Row]:
    csv.field_size_limit(max(csv.field_size_limit(), max_line_bytes()))  # the default, 128 KiB, would cut long texts
    lines = (line.replace("\r\n", "\n").replace("\r", "\n") for _, line in read_lines(path))  # universal newlines
    reader = csv.reader(lines, delimiter="\t" if path.suffix == ".tsv" else ",", strict=True)
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

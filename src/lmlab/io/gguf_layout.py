"""Where a GGUF file's tensors lie: checked before a byte of them is read, and a key for its content.

A GGUF header gives each tensor a type, a shape and an offset into the data section; nothing
stops a damaged or hostile header from giving a tensor another's bytes, or a type whose blocks
read past it. Writers (llama.cpp's and gguf-py's) lay the tensors end to end, each padded to the
file's alignment, so we ask exactly that: sorted by offset, every tensor begins where the one
before it ends (padded), its size is what its type and shape make, and the last one ends where
the file does. A changed type or shape, or an offset pointing elsewhere, breaks that tiling.
"""

import hashlib
import json
import math
from pathlib import Path

from gguf import GGML_QUANT_SIZES, GGUFReader

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_write_text

HEAD_BYTES = 16 << 20  # the header and tensor-info block of any usual model fit in this many first bytes
SAMPLES, SAMPLE_BYTES = 64, 64 << 10  # and this many slices, spread over the rest, stand for the weights
MEMO_ENTRIES, MEMO_BYTES = 256, 1 << 20  # files a content-key memo remembers; a bigger memo file is not read


def check_layout(reader: GGUFReader, path: Path) -> None:
    """Every tensor of `reader` has a shape its type can store, and the tensors tile the data section."""
    spans = []
    for t in reader.tensors:
        block, type_size = GGML_QUANT_SIZES[t.tensor_type]
        dims = [int(n) for n in t.shape]
        if not dims or min(dims) < 1 or dims[0] % block:
            raise LmlabError(f"{path}: tensor '{t.name}' has shape {tuple(reversed(dims))}, which type "
                             f"{t.tensor_type.name} cannot store; the file is damaged, download it again")
        spans.append((t.data_offset, t.data_offset + math.prod(dims) // block * type_size, t.name))
    spans.sort()
    expected, previous = reader.data_offset, "the header"
    for begin, end, name in spans:
        if begin != expected:
            where = "overlaps" if begin < expected else f"leaves {begin - expected} unused bytes after"
            raise LmlabError(f"{path}: tensor '{name}' {where} {previous}; the tensors' types, shapes or offsets "
                             "are damaged, download the file again")
        expected, previous = _padded(end, reader.alignment), f"tensor '{name}'"
    if spans and spans[-1][1] > len(reader.data):
        raise LmlabError(f"{path}: tensor '{spans[-1][2]}' ends past the end of the file; it is truncated, "
                         "download it again")
    if spans and len(reader.data) > expected:
        raise LmlabError(f"{path}: {len(reader.data) - expected} unused bytes follow the last tensor "
                         f"('{spans[-1][2]}'); its type or shape is damaged, download the file again")


def content_key(path: Path, memo: Path | None = None) -> str:
    """A hash of the file's size, its first `HEAD_BYTES` (header and tensor infos) and `SAMPLES` slices
    spread over the rest: two files that differ in name only share it, two different files do not,
    and it reads a few MB whatever the file's size (~20 ms for a 100 MB model, a sixth of a warm load).

    With `memo` (a JSON file in lmlab's cache that `remember_content_key` writes once a file has loaded),
    a file seen before is not read again while its stat is unchanged: device, inode, size, modification
    and change times. The kernel sets the change time (ctime) on every write, rename or chmod, and no
    call lets a user set it back, so the same stat means the same bytes, as git's index and build tools
    take it. A memo that cannot be read is ignored."""
    path = Path(path).resolve()
    entry = _read_memo(memo).get(str(path)) if memo is not None else None
    if isinstance(entry, dict) and entry.get("stat") == file_identity(path) and isinstance(entry.get("key"), str):
        return entry["key"]
    return _hash_content(path, path.stat().st_size)


def file_identity(path: Path) -> list[int]:
    """What `content_key`'s memo compares: the file's device, inode, size, mtime and ctime (ns)."""
    stat = Path(path).resolve().stat()
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def remember_content_key(path: Path, identity: list[int], key: str, memo: Path) -> None:
    """Note in `memo` that the file at `path`, as `identity` describes it, has content key `key`: called after
    the file loaded, so a refused file leaves nothing behind. Nothing is noted if the file changed since
    `identity` was taken; the memo keeps the last `MEMO_ENTRIES` files; a memo that cannot be written is
    skipped (the key is computed again next time)."""
    path = Path(path).resolve()
    if file_identity(path) != identity:
        return
    known = _read_memo(memo)
    if known.get(str(path)) == {"stat": identity, "key": key}:
        return
    known.pop(str(path), None)
    kept = dict(list(known.items())[-(MEMO_ENTRIES - 1):])  # the most recent files, in insertion order
    try:
        atomic_write_text(memo, json.dumps({**kept, str(path): {"stat": identity, "key": key}}))
    except (OSError, LmlabError):
        pass  # a cache that cannot be written (read-only, a directory in the way)


def _hash_content(path: Path, size: int) -> str:
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(HEAD_BYTES))
        if size > HEAD_BYTES:
            for i in range(SAMPLES):
                f.seek(HEAD_BYTES + (size - HEAD_BYTES) * i // SAMPLES)
                digest.update(f.read(SAMPLE_BYTES))
    return digest.hexdigest()[:16]


def _read_memo(memo: Path) -> dict:
    try:
        known = json.loads(memo.read_text()) if memo.stat().st_size <= MEMO_BYTES else {}
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _padded(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment

"""The fp32 decoding layouts measured on this CPU (`layout_timing.py`), kept in lmlab's cache.

Timing a model's shapes takes about a second, so the speeds are kept, per CPU and shape, in
`$LMLAB_CACHE/layouts/<hash>.json` (default ~/.cache/lmlab): one file per CPU key (the CPU's model
name and flags from /proc/cpuinfo, its core count, torch's thread count and version: a change of
any of them can change the fastest layout), holding the speeds of every shape measured, and a
checksum of them. Timings taken on a busy machine (a load average above the core count) are
taken again once it is less than half as busy, so a measurement spoilt by other work does not stay
for good. A file is trusted only whole: one that is too large, not JSON, for another CPU,
with a shape, bucket, layout or speed that is not one `layout_timing` writes, or whose checksum does
not match (a hand edit) is ignored, measured again and replaced. Files are written atomically and
bounded (`MAX_SHAPES` shapes, the oldest dropped). In one process, a shape is timed at most once.
"""

import functools
import hashlib
import json
import math
import os
import platform
import re
from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.generation.layout_timing import BUCKETS, LAYOUTS, StreamTimer, choose, measure, stream_bytes
from lmlab.io.atomic import atomic_write_text
from lmlab.io.cache import cache_dir
from lmlab.io.json_file import parse_json_object, read_json_text

FORMAT = "lmlab fp32 decoding layouts 1"
MAX_SHAPES = 1024  # shapes kept per CPU; a file stays under ~0.5 MB
MAX_BYTES = 1 << 20
SHAPE = re.compile(r"^[1-9][0-9]{0,6}x[1-9][0-9]{0,6}:[a-z0-9]{1,12}$")  # "960x576:float32"

Speeds = dict[int, dict[str, float]]  # bucket -> layout -> GB/s
Entry = tuple[float, Speeds]  # the load average per core while measuring, the speeds
_MEASURED: dict[tuple[str, str], Speeds] = {}  # (CPU key, shape) -> speeds, this process's


def shape_key(weight: torch.Tensor) -> str:
    """'960x576:float32' for a (960, 576) fp32 weight."""
    return f"{weight.size(0)}x{weight.size(1)}:{str(weight.dtype).removeprefix('torch.')}"


def layouts_for(weights: dict[str, list[torch.Tensor]]) -> dict[str, tuple[str, ...]]:
    """The layout of every row bucket for each shape of `weights` (shape key -> the model's matrices
    of that shape, in the order a step reads them): from this process, else the cache file, else
    measured on them now (and cached)."""
    key = cpu_key()
    speeds = {shape: _MEASURED[(key, shape)] for shape in weights if (key, shape) in _MEASURED}
    if len(speeds) < len(weights):
        path, load = cache_file(key), load_per_core()
        stored = read_entries(path, key)
        speeds |= {shape: stored[shape][1] for shape in weights
                   if shape in stored and shape not in speeds and not spoilt(stored[shape][0], load)}
        missing = {shape: matrices for shape, matrices in weights.items() if shape not in speeds}
        if missing:
            measured = measure(list(missing), StreamTimer(missing, stream_bytes(len(missing))))
            speeds |= measured
            kept = {shape: entry for shape, entry in stored.items() if shape not in measured}
            _write_entries(path, key, kept | {shape: (load, value) for shape, value in measured.items()})
        _MEASURED.update({(key, shape): value for shape, value in speeds.items()})
    return {shape: choose(speeds[shape]) for shape in weights}


def cpu_key() -> str:
    """What the fastest layout depends on besides the shape: the CPU, the cores, torch's threads and version."""
    return f"{cpu_description()}|cores={os.cpu_count()}|threads={torch.get_num_threads()}|torch={torch.__version__}"


@functools.cache
def cpu_description() -> str:
    """The first CPU's model name and sorted flags from /proc/cpuinfo ('model|flags'; the platform's
    processor name where there is no /proc/cpuinfo)."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())  # the first CPU's
    except OSError:
        pass
    return f"{fields.get('model name', platform.processor())}|{' '.join(sorted(fields.get('flags', '').split()))}"


def load_per_core() -> float:
    """The last minute's load average over the core count (0 where the OS does not say)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return 0.0


def spoilt(load_then: float, load_now: float) -> bool:
    """Whether timings taken at `load_then` should be taken again now: the machine was busier than
    its cores then, and is less than half as busy now."""
    return load_then > 1 and load_now < load_then / 2


def cache_file(key: str) -> Path:
    return cache_dir("layouts") / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def read_entries(path: Path, key: str) -> dict[str, Entry]:
    """The timings stored in `path` for CPU `key`, or {} when the file is missing or not wholly valid."""
    if not path.exists():
        return {}
    try:
        stored = parse_json_object(read_json_text(path, "", MAX_BYTES), path, "")
    except LmlabError:
        return {}
    shapes = stored.get("shapes")
    if (stored.get("format") != FORMAT or stored.get("cpu") != key or not isinstance(shapes, dict)
            or len(shapes) > MAX_SHAPES or stored.get("checksum") != _checksum(key, shapes)):
        return {}
    entries = {shape: _valid_entry(value) for shape, value in shapes.items() if SHAPE.match(shape)}
    if len(entries) != len(shapes) or any(entry is None for entry in entries.values()):
        return {}
    return entries


def _valid_entry(value: object) -> Entry | None:
    """(load, {bucket: {layout: GB/s}}) from its JSON form, or None unless the load and every bucket
    and layout are there, with a finite load and finite positive speeds."""
    if not isinstance(value, dict) or sorted(value) != sorted(["load", *(str(rows) for rows in BUCKETS)]):
        return None
    load = value["load"]
    if type(load) not in (int, float) or not 0 <= load < 1e4:  # NaN fails too
        return None
    speeds = {}
    for rows in BUCKETS:
        by_layout = value[str(rows)]
        if not isinstance(by_layout, dict) or sorted(by_layout) != sorted(LAYOUTS):
            return None
        if not all(type(v) in (int, float) and math.isfinite(v) and 0 < v < 1e6 for v in by_layout.values()):
            return None
        speeds[rows] = {layout: float(by_layout[layout]) for layout in LAYOUTS}
    return float(load), speeds


def _write_entries(path: Path, key: str, entries: dict[str, Entry]) -> None:
    """Store `entries` (the newest `MAX_SHAPES` shapes) atomically; a cache that cannot be written
    only means measuring again next time."""
    shapes = {shape: {"load": round(load, 3), **{str(rows): speeds[rows] for rows in BUCKETS}}
              for shape, (load, speeds) in list(entries.items())[-MAX_SHAPES:]}
    text = json.dumps({"format": FORMAT, "cpu": key, "shapes": shapes, "checksum": _checksum(key, shapes)}, indent=1)
    try:
        atomic_write_text(path, text)
    except (LmlabError, OSError):
        pass


def _checksum(key: str, shapes: object) -> str:
    return hashlib.sha256(json.dumps([FORMAT, key, shapes], sort_keys=True).encode()).hexdigest()

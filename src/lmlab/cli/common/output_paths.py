"""One rule for every command: what it writes is never what it reads.

Before a command runs, each path it will write (`--out`, `--png` and the other flags of OUTPUTS, or
what its parser names in `writes`) is compared with each path it reads (the flags of INPUTS, a zoo
name as its cache directory): an output that is an input, lies inside one, or holds one is refused
in one line, before any work (`outputs.check_not_inputs`).
"""

import argparse
from pathlib import Path

from lmlab.io.outputs import check_not_inputs

OUTPUTS = {"out": "--out", "png": "--png", "heatmap": "--heatmap", "html": "--html", "png_maps": "--png-maps"}
INPUTS = {"model": "--model", "data": "--data", "tokenizer": "--tokenizer", "eval": "--eval", "adapter": "--adapter",
          "arpa": "--arpa", "source": "--from", "include_path": "--include-path", "held_out": "--held-out",
          "reference": "--reference", "reward_model": "--reward-model", "pairs": "--pairs",
          "embedding_model": "--embedding-model", "task": "--task", "questions": "--questions",
          "corpus": "--data", "ptx_data": "--ptx-data", "judge": "--judge", "reward_fn": "--reward-fn",
          "encoder": "--encoder", "index": "--index", "rag": "--rag"}
MODEL_INPUTS = ("model", "reference", "reward_model", "embedding_model", "judge", "encoder")  # may name a zoo model


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse the command of `args` if one of its outputs is, holds or lies inside one of its inputs.
    A parser names outputs beyond OUTPUTS with `set_defaults(writes=("dest", ...))`."""
    writes = set(getattr(args, "writes", ()))
    flags = OUTPUTS | INPUTS
    outputs = [(flags[dest], path) for dest in [*OUTPUTS, *writes] for path in _paths(getattr(args, dest, None))]
    if not outputs:
        return
    inputs = [(flag, _input_path(dest, path)) for dest, flag in INPUTS.items() if dest not in writes
              for path in _paths(getattr(args, dest, None))]
    check_not_inputs(outputs, inputs)


def _paths(value) -> list[str]:
    """The path(s) a flag's parsed value names (a flag given many times, or with many values, names many)."""
    if value is None or isinstance(value, bool):
        return []
    values = value if isinstance(value, (list, tuple)) else [value]
    return [str(v) for v in values if isinstance(v, (str, Path))]


def _input_path(dest: str, value: str) -> str:
    """Where the input `value` of flag `dest` lives on disk: a zoo model's cache directory, else the path itself."""
    if dest == "reward_fn":  # file.py:function (or module:function, no file): the file is the input
        return value.rpartition(":")[0] or value
    if dest in MODEL_INPUTS:
        from lmlab.io import zoo

        if value in zoo.ZOO:
            return str(zoo.download_dir(value))
    return value

"""lmlab's C++ libraries of torch ops, compiled once on this machine at first use: the quantized matmul
kernels (quantized_matmul.cpp) and the fused decoding step built on them (decoder_step.cpp,
`generation/fused.py`) here; the n-gram scorer and the word2vec trainer beside their models.

Why a kernel of our own: a decoding step multiplies each weight matrix by one or a few rows, so its
speed is how many bytes of weights it streams. torch's weight-only ops do not serve on x86 CPUs at
those shapes, nor does torchao; measured at batch 1 on SmolLM2-135M's matrices (AMD EPYC Zen 4,
2 threads, torch 2.13, torchao 0.18):

    weight (in x out)   fp32 F.linear   torch int8pack_mm   torch int4pack_mm   torchao int8 / int4 weight-only
    576 x 1728              81 us            408 us              876 us            7158 us / 24156 us
    576 x 49152 (head)     9.9 ms           11.7 ms             24.3 ms            77.6 ms / -

(torchao's Int4WeightOnlyConfig has no CPU layout; its fast low-bit CPU kernels target ARM).
quantized_matmul.cpp keeps activations in fp32 and unpacks the integers in registers: 39 us and 1-1.5 ms
on the same two matrices (int4 and int8), see the file's header.

Each library is built with torch's C++ extension tools (ninja and the system's C++ compiler) into the
lmlab cache, for this CPU (-march=native: the folder name carries the CPU's flags, so a cache shared
between machines never runs code built for another). If one cannot be built, one warning says so and
its callers fall back to numpy or torch: for the quantized kernels, dequantizing in torch
(`quantized_ops.py`), slower, same numbers.
"""

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

# -ffp-contract=off: the plain C++ loops round exactly as torch's own ops do (dequantizing gives the same bits)
FLAGS = ("-O3", "-march=native", "-fopenmp", "-ffp-contract=off")


@dataclass(frozen=True)
class Library:
    """A C++ library of torch ops, compiled on first use: `name` is its ops' namespace (torch.ops.NAME), `what`
    and `fallback` complete the lines that say it is being built or could not be."""

    name: str
    sources: tuple[Path, ...]
    what: str  # "the quantized matmul kernels"
    fallback: str  # what happens without it: "int8/int4 models run on a slower path (...)"
    headers: tuple[Path, ...] = ()
    flags: tuple[str, ...] = FLAGS


QUANTIZED = Library("lmlab_quant", tuple(Path(__file__).with_name(name) for name in (
                        "quantized_matmul.cpp", "activation_rounding.cpp", "decoder_step.cpp")),
                    "the quantized matmul kernels", "int8/int4 models run on a slower path (dequantize, then F.linear)",
                    tuple(Path(__file__).with_name(name) for name in ("quantized_matmul.h", "kernel_vectors.h")))

_loaded: dict[str, object] = {}  # library name -> torch.ops.NAME, or None once building has failed


def kernel_ops():
    """torch.ops.lmlab_quant (int4_linear, int8_linear, rounded_linear, int4_dequantize, int8_dequantize, set_isa,
    decoder_step), built
    the first time on this machine (a minute; one line on stderr says so); None if it cannot be built."""
    first = QUANTIZED.name not in _loaded
    ops = compiled(QUANTIZED)
    if first and ops is not None:
        _register_fakes()
    return ops


def compiled(library: Library):
    """torch.ops.NAME of `library`, built the first time on this machine (one line on stderr says so) and
    loaded once per process; None, after one warning, if it cannot be built."""
    if library.name not in _loaded:
        _loaded[library.name] = _build(library)
    return _loaded[library.name]


def _build(library: Library):
    directory = build_dir(library)
    if not (directory / f"{library.name}.so").is_file():
        print(f"lmlab: compiling {library.what} for this CPU (once for this machine and environment, 1 to 4 minutes) into {directory}",
              file=sys.stderr, flush=True)
    try:
        from torch.utils import cpp_extension
        cpp_extension.load(library.name, [str(source) for source in library.sources], extra_cflags=list(library.flags),
                           build_directory=str(directory), is_python_module=False, verbose=False)
    except Exception as e:  # no compiler, no ninja, a failed build: every cause means the same fallback
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        warnings.warn(f"lmlab could not build {library.what} ({first_line}); {library.fallback}. Install a C++ "
                      "compiler and ninja to speed them up", RuntimeWarning, stacklevel=3)
        return None
    return getattr(torch.ops, library.name)


def _register_fakes() -> None:
    """Output shapes of the quantized ops for torch.compile's tracing (which runs no kernel)."""
    def linear_shape(x, q, *rest):
        return x.new_empty(*x.shape[:-1], q.size(0))

    def dequantized_shape(q, *rest):
        width = q.size(1) * 2 if q.dtype == torch.uint8 else q.size(1)
        return q.new_empty(q.size(0), width, dtype=torch.float32)

    for op, fake in (("int4_linear", linear_shape), ("int8_linear", linear_shape), ("rounded_linear", linear_shape),
                     ("int4_dequantize", dequantized_shape), ("int8_dequantize", dequantized_shape)):
        torch.library.register_fake(f"{QUANTIZED.name}::{op}")(fake)


def build_dir(library: Library) -> Path:
    """Where `library` is built: lmlab's cache (``$LMLAB_CACHE``, else ``~/.cache/lmlab``, as lmlab.io.cache
    has it: modules/ reads no files module), in a folder named after everything the binary depends on
    (`build_key`): each distinct build is made once and kept beside the others, so two environments sharing
    the cache (same torch, another install or compiler) each reuse their own instead of rebuilding in turn."""
    root = Path(os.environ.get("LMLAB_CACHE") or Path.home() / ".cache" / "lmlab")
    directory = root / "kernels" / f"{library.name}-{build_key(library)}"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def build_key(library: Library) -> str:
    """A hash of what changes `library`'s binary: its sources and headers, the flags, torch (version, C++ ABI and
    the headers it compiles against, which differ between installs), Python (version and headers), the C++
    compiler and this CPU."""
    key = hashlib.sha256()
    for path in (*library.sources, *library.headers):
        key.update(path.read_bytes())
    from torch.utils.cpp_extension import include_paths
    parts = (" ".join(library.flags), torch.__version__, str(torch._C._GLIBCXX_USE_CXX11_ABI), *include_paths(),
             platform.python_version(), sysconfig.get_paths()["include"], _compiler(), _cpu_flags())
    for part in parts:
        key.update(part.encode() + b"\0")
    return key.hexdigest()[:16]


@functools.cache
def _compiler() -> str:
    """The C++ compiler torch's extension tools build with ($CXX, else c++): its path and version line."""
    name = os.environ.get("CXX", "c++")
    path = shutil.which(name)
    if path is None:
        return name
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    return f"{os.path.realpath(path)} {(version.splitlines() or [''])[0]}"


def _cpu_flags() -> str:
    """The CPU's model and instruction-set flags (Linux), else the platform's name for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return platform.machine() + line
    except OSError:
        pass
    return platform.machine() + platform.processor()

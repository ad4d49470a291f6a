"""Attention over long inputs: time and peak memory of one attention layer's forward + backward, from 512 to
16k tokens, for each efficient method of lmlab.modules.efficient_attention against torch's SDPA (full
attention, causal and bidirectional).

The layer is lmlab's SelfAttention (d_model 256, 4 heads of 64) with the method's core, batch 1, fp32.
Causal methods (window, bigbird, lsh, performer) are compared with causal SDPA, the bidirectional ones
(linformer, nystrom) with bidirectional SDPA. Times are medians of --rounds rounds, the methods interleaved
within each round (benchmarks/machine.alternating); peak memory is measured once per point in a fresh
process (the rise of its peak RSS over a run, VmHWM reset just before it; on a GPU torch's peak allocation).
Reported: the slope of log time and log memory against log length over the lengths from 2k on (about 2 for
full attention, about 1 for the linear ones) and the crossover: the shortest length from which a method is
faster than SDPA. Writes benchmarks/results/long_attention.json and .png.

  python benchmarks/long_attention.py                  # 512 .. 16k tokens
  python benchmarks/long_attention.py --max-length 32768
  python benchmarks/long_attention.py --quick          # 512 .. 2k, one round: a smoke test
"""

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from lmlab.config_checks import BIDIRECTIONAL_ATTENTION
from lmlab.figures import save_line_plot
from lmlab.modules.attention import SelfAttention
from lmlab.modules.efficient_attention import METHODS, attention_core
from machine import alternating, device_name, in_fresh_process, synchronize  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "long_attention.json"
D_MODEL, HEADS = 256, 4
SETTINGS = dict(attention_window=128, attention_globals=1, attention_random=2, attention_hashes=2,
                attention_rank=128)
SLOPE_FROM = 2048


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-length", type=int, default=16384)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="512 to 2k tokens, one round")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--memory-of", nargs=2, metavar=("SIDE", "LENGTH"), help=argparse.SUPPRESS)  # the fresh process
    return p.parse_args()


def sides() -> list[tuple[str, bool]]:
    """(method, causal): SDPA both ways, each causal method causal, each bidirectional-only one bidirectional."""
    return [("full", True), ("full", False)] + [(m, m not in BIDIRECTIONAL_ATTENTION) for m in METHODS if m != "full"]


def name(method: str, causal: bool) -> str:
    return f"{'sdpa' if method == 'full' else method} ({'causal' if causal else 'bidirectional'})"


def layer(method: str, causal: bool, max_length: int, device: torch.device) -> SelfAttention:
    cfg = SimpleNamespace(attention=method, d_model=D_MODEL, n_heads=HEADS, context_length=max_length, **SETTINGS)
    return SelfAttention(D_MODEL, HEADS, core=attention_core(cfg, causal)).to(device)


def step(module: SelfAttention, causal: bool, x: torch.Tensor) -> None:
    """One forward and backward pass. Full attention without a mask is causal; a bidirectional one gets an
    all-true mask, which SDPA still runs fused."""
    mask = None if causal else torch.ones(1, 1, 1, x.size(1), dtype=torch.bool, device=x.device)
    module(x, mask).sum().backward()


def time_one(module, causal: bool, length: int, device: torch.device) -> float:
    x = torch.randn(1, length, D_MODEL, device=device, requires_grad=True)
    synchronize(device)
    start = time.perf_counter()
    step(module, causal, x)
    synchronize(device)
    return time.perf_counter() - start


def peak_memory_mib(method: str, causal: bool, length: int, device: torch.device) -> float:
    """The memory one forward + backward at `length` adds at its peak (run in a fresh process on a CPU)."""
    module = layer(method, causal, length, device)
    step(module, causal, torch.randn(1, 64, D_MODEL, device=device, requires_grad=True))  # load the kernels
    x = torch.randn(1, length, D_MODEL, device=device, requires_grad=True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step(module, causal, x)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    Path("/proc/self/clear_refs").write_text("5")  # Linux: the peak RSS (VmHWM) starts again from here
    before = status_kib("VmRSS")
    step(module, causal, x)
    return (status_kib("VmHWM") - before) / 1024


def status_kib(field: str) -> int:
    """A size from /proc/self/status (Linux only), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit("no /proc/self/status: peak memory is measured on Linux only")


def slope(lengths: list[int], values: list[float]) -> float | None:
    """The least-squares slope of log value against log length over the lengths from SLOPE_FROM on."""
    points = [(math.log(n), math.log(v)) for n, v in zip(lengths, values) if n >= SLOPE_FROM and v > 0]
    if len(points) < 2:
        return None
    mx, my = (sum(p[i] for p in points) / len(points) for i in (0, 1))
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def crossover(lengths: list[int], ours: list[float], sdpa: list[float]) -> float | None:
    """The length from which `ours` stays below `sdpa`, interpolated in log-log between measured lengths;
    None if it never does within the lengths measured."""
    ratio = [math.log(a / b) for a, b in zip(ours, sdpa)]
    if ratio[-1] >= 0:
        return None
    first = max((i for i, r in enumerate(ratio) if r >= 0), default=None)
    if first is None:
        return float(lengths[0])
    a, b = ratio[first], ratio[first + 1]
    x0, x1 = math.log(lengths[first]), math.log(lengths[first + 1])
    return math.exp(x0 + (x1 - x0) * a / (a - b))


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.memory_of:
        method, causal = args.memory_of[0].split(":")
        print(json.dumps({"peak_mib": peak_memory_mib(method, causal == "causal", int(args.memory_of[1]), device)}))
        return
    max_length = 2048 if args.quick else args.max_length
    rounds = 1 if args.quick else args.rounds
    lengths = [512 * 2**i for i in range(int(math.log2(max_length // 512)) + 1)]
    modules = {(m, c): layer(m, c, max_length, device) for m, c in sides()}
    for (_, c), module in modules.items():  # warm up: kernels, allocator
        step(module, c, torch.randn(1, 512, D_MODEL, device=device, requires_grad=True))
    times: dict[tuple, list[float]] = {}
    for _, (side, length) in alternating([(s, n) for n in lengths for s in modules], rounds):
        times.setdefault((side, length), []).append(time_one(modules[side], side[1], length, device))
        print(f"  {name(*side):28s} {length:6d} tokens  {times[side, length][-1] * 1000:9.1f} ms", flush=True)
    results = {}
    for side in modules:
        ms = [sorted(times[side, n])[len(times[side, n]) // 2] * 1000 for n in lengths]
        memory = [in_fresh_process(__file__, ["--memory-of", f"{side[0]}:{'causal' if side[1] else 'bi'}", str(n),
                                              "--device", str(device)]
                                   + (["--threads", str(args.threads)] if args.threads else []))["peak_mib"]
                  for n in lengths] if device.type == "cpu" else \
            [peak_memory_mib(*side, n, device) for n in lengths]
        results[name(*side)] = {"method": side[0], "causal": side[1], "ms": ms, "peak_mib": memory,
                                "time_slope": slope(lengths, ms), "memory_slope": slope(lengths, memory)}
    for r in results.values():
        sdpa = results[name("full", r["causal"])]
        r["crossover_tokens"] = None if r["method"] == "full" else crossover(lengths, r["ms"], sdpa["ms"])

    header = ("| method | " + " | ".join(f"{n} ms / MiB" for n in lengths)
              + " | time slope | memory slope | faster than SDPA from |")
    print("\n" + header + "\n|---|" + "---:|" * (len(lengths) + 3))
    for label, r in results.items():
        cells = " | ".join(f"{t:.1f} / {m:.0f}" for t, m in zip(r["ms"], r["peak_mib"]))
        cross = "-" if r["method"] == "full" else ("not within these lengths" if r["crossover_tokens"] is None
                                                     else f"{r['crossover_tokens']:.0f} tokens")
        slopes = [f"{s:.2f}" if s is not None else "-" for s in (r["time_slope"], r["memory_slope"])]
        print(f"| {label} | {cells} | {slopes[0]} | {slopes[1]} | {cross} |")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"device": str(device), "device_name": device_name(device), "cpu_count": os.cpu_count(),
               "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
               "python": platform.python_version(), "load_average_1min": os.getloadavg()[0]}
    settings = {"d_model": D_MODEL, "heads": HEADS, "batch": 1, "dtype": "float32", "lengths": lengths,
                "rounds": rounds, "slope_from": SLOPE_FROM} | SETTINGS
    args.out.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2))
    save_line_plot(args.out.with_suffix(".png"), {label: (lengths, r["ms"]) for label, r in results.items()},
                   title="Attention layer: fwd + bwd", xlabel="tokens", ylabel="ms",
                   log_x=True, log_y=True, size=(900, 600))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()

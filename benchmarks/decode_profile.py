"""Where a decoding step's time goes: lmlab int4 on SmolLM2-135M-Instruct, batch 1, on this CPU.

A step streams every weight once, so it is first compared with what the memory gives:

  bandwidth   the machine's read bandwidth (GB/s): torch summing a 512 MiB tensor, on 1 and 2 threads
  weights     bytes of quantized weights one step reads (integers, scales and mins of every matrix and the LM head)
  step        the fused C++ step alone (ms), on 1 and 2 threads, at a context of --context positions; the GB/s it
              reads the weights at
  matrices    the same step's matrix-vector products alone: each quantized matrix through the kernels' op once,
              in the step's order, less the op's fixed cost (a call on a tiny matrix, per matrix); the rest of the
              step is attention, norms, rotations and the embedding
  wake-up     what sharing a piece of work between threads costs before any of it is done: a tiny matrix's
              call on 2 threads minus on 1, times the pieces of a step (its matrices and attention layers)
  loop        a token of `generate_batch` (greedy, the same prompt; 64 tokens less 8, so the prefill cancels)
              less one fused step: the Python loop, the embedding row, sampling and the stop checks
  busy        the fused step on 1 and 2 threads beside one busy process of our own: what a shared core costs

Usage: python benchmarks/decode_profile.py [--repeats 50] [--context 64] [--activations fp32]; writes
results/decode_profile.json (--out to keep both).
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.fused import fused_step
from lmlab.generation.threads import pin_threads
from lmlab.models.load import load
from lmlab.modules.kernels.build import kernel_ops
from lmlab.modules.quantized import QuantizedLinear
from lmlab.modules.quantized_formats import quantize_int4
from lmlab.modules.quantized_ops import quantized_linear
from machine import busy_processes, device_name, downloaded  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "decode_profile.json"
MODEL = "smollm2-135m-instruct"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=50, help="timings per measurement; the median is kept")
    p.add_argument("--context", type=int, default=64, help="positions already in the KV cache")
    p.add_argument("--activations", choices=["fp32", "int8"], default="int8",
                   help="what the int4 matrices multiply: int8 rounded as llama.cpp rounds them (integer dot "
                        "products; lmlab's default for the GGUF file), or fp32 activations")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args()


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def on_threads(threads: int, fn):
    """fn() with torch and decoding pinned to `threads` threads (no tuning: the profile compares fixed counts)."""
    before = torch.get_num_threads()
    pin_threads(threads)
    try:
        return fn()
    finally:
        pin_threads(None)
        torch.set_num_threads(before)


def bandwidth(threads: int) -> float:
    """GB/s of summing a 512 MiB fp32 tensor (read once per sum, far larger than any cache)."""
    x = torch.ones(2**27)
    return on_threads(threads, lambda: x.numel() * 4 / median_seconds(lambda: x.sum(), 9) / 1e9)


def matrices(model) -> list[QuantizedLinear]:
    return [m for m in model.modules() if isinstance(m, QuantizedLinear)]


def weight_bytes(model) -> int:
    return sum(t.numel() * t.element_size() for m in matrices(model)
               for t in (m.weight.q, m.weight.scales, m.weight.mins) if t is not None)


def step_timer(model, context: int):
    """A call of the fused step at batch 1 with `context` positions in a KV cache."""
    step = fused_step(model)
    cfg = model.config
    shape = (1, cfg.n_kv_heads or cfg.n_heads, context + 1, cfg.head_dim)
    k = [torch.randn(shape) for _ in range(cfg.n_layers)]
    v = [torch.randn(shape) for _ in range(cfg.n_layers)]
    token = torch.tensor([42])
    return lambda: step(token, k, v, [context])


def matrices_timer(model):
    """Every quantized matrix of a step through the kernels' op once, in order, on one row."""
    calls = [(m, torch.randn(1, m.in_features)) for m in matrices(model)]
    return lambda: [m(x) for m, x in calls]


def fixed_cost_timer():
    """One op call on a tiny matrix (64 x 64, enough rows to be shared among threads): the dispatch, and on
    several threads the hand-over to them and the wait for the last."""
    weight, x = quantize_int4(torch.randn(64, 64), 32), torch.randn(1, 64)
    return lambda: quantized_linear(x, weight)


def main() -> None:
    args = parse_args()
    kernel_ops()
    model, tokenizer = load(downloaded(MODEL), "int4", activations=args.activations)
    most = torch.get_num_threads()
    counts = sorted({1, most})
    step, mats, tiny = step_timer(model, args.context), matrices_timer(model), fixed_cost_timer()
    prompt = tokenizer.encode("Once upon a time, in a small village at the edge of a great forest,")

    def generation_seconds(n: int) -> float:
        start = time.perf_counter()
        generate_batch(model, [prompt], GenerationConfig(max_new_tokens=n))
        return time.perf_counter() - start

    def token_seconds() -> float:
        return (generation_seconds(64) - generation_seconds(8)) / 56

    r = {"weights_mib": weight_bytes(model) / 2**20, "matrices": len(matrices(model)), "threads": {}}
    for t in counts:
        s = {"bandwidth_gb_s": bandwidth(t),
             "step_ms": 1e3 * on_threads(t, lambda: median_seconds(step, args.repeats)),
             "fixed_cost_us": 1e6 * on_threads(t, lambda: median_seconds(tiny, 20 * args.repeats))}
        s["matrices_ms"] = 1e3 * on_threads(t, lambda: median_seconds(mats, args.repeats)) \
            - r["matrices"] * s["fixed_cost_us"] / 1e3
        s["token_ms"] = 1e3 * statistics.median(on_threads(t, token_seconds) for _ in range(5))
        s["loop_ms"] = s["token_ms"] - s["step_ms"]
        s["weights_gb_s"] = weight_bytes(model) / (s["step_ms"] / 1e3) / 1e9
        r["threads"][t] = s
    pieces = r["matrices"] + model.config.n_layers  # parallel regions per step: matrices and attention layers
    if most > 1:
        r["wake_up_ms_per_step"] = pieces * (r["threads"][most]["fixed_cost_us"] - r["threads"][1]["fixed_cost_us"]) / 1e3
    with busy_processes(1):
        r["busy_step_ms"] = {t: 1e3 * on_threads(t, lambda: median_seconds(step, args.repeats)) for t in counts}

    print(f"SmolLM2-135M int4, {args.activations} activations, batch 1, context {args.context}; {device_name(torch.device('cpu'))}, "
          f"{os.cpu_count()} cores, torch {torch.__version__}; load average {os.getloadavg()[0]:.1f}")
    print(f"weights read per step: {r['weights_mib']:.1f} MiB in {r['matrices']} matrices")
    print(f"{'':<44}" + "".join(f"{f'{t} thread' + ('s' if t > 1 else ''):>12}" for t in counts))
    rows = [("memory read bandwidth (GB/s)", "bandwidth_gb_s", ".1f"), ("fused step (ms)", "step_ms", ".2f"),
            ("  weights streamed at (GB/s)", "weights_gb_s", ".1f"), ("  matrix-vector products (ms)", "matrices_ms",
                                                                       ".2f"),
            ("op's fixed cost per call (us)", "fixed_cost_us", ".1f"), ("a generated token (ms)", "token_ms", ".2f"),
            ("  of which outside the fused step (ms)", "loop_ms", ".2f")]
    for label, key, fmt in rows:
        print(f"{label:<44}" + "".join(f"{format(r['threads'][t][key], fmt):>12}" for t in counts))
    print(f"{'fused step beside 1 busy process (ms)':<44}" + "".join(f"{r['busy_step_ms'][t]:>12.2f}" for t in counts))
    if most > 1:
        print(f"threads' hand-over and wake-up, {pieces} pieces a step: {r['wake_up_ms_per_step']:.2f} ms per step")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"cpu": device_name(torch.device("cpu")), "cores": os.cpu_count(),
                                    "context": args.context, "activations": args.activations, "results": r}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""How OpenMP's wait policy and the thread count change decode speed, quiet and beside a busy process: the
measurements behind lmlab's choices (keep libgomp's spin-then-sleep default; pick the count per step by timing,
generation/threads.py).

Both lmlab's kernels (through torch) and llama.cpp (llama-cpp-python built with GGML_OPENMP, as it comes) share
work among threads with libgomp, whose waiting threads first spin (GOMP_SPINCOUNT iterations; OMP_WAIT_POLICY=
active spins on, passive sleeps at once) and then sleep in the kernel. libgomp reads these settings once, when it
loads, so every (policy, side) runs in a fresh process; rounds interleave them. Each process decodes --new-tokens
greedy at batch 1 after the same prompt, --repeats times, and reports the median tokens/s. lmlab runs "tuned" (its
default: the count picked per step) and "2 pinned" (--threads 2); llama.cpp runs n_threads=2 (its count for this
machine's cores).

Usage: python benchmarks/thread_policies.py [--rounds 3] [--contention 1]; writes results/thread_policies.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from machine import alternating, busy_processes, downloaded

RESULTS = Path(__file__).parent / "results" / "thread_policies.json"
MODEL = "smollm2-135m-instruct"
POLICIES = {"libgomp default": {}, "passive (sleep at once)": {"OMP_WAIT_POLICY": "passive"},
            "spin 10k then sleep": {"GOMP_SPINCOUNT": "10000"}, "active (spin on)": {"OMP_WAIT_POLICY": "active"}}
SIDES = ("lmlab int4 tuned", "lmlab int4 2 pinned", "llama.cpp 2 threads")


def child(side: str, new_tokens: int, repeats: int) -> None:
    """Print the median tokens/s of `side` decoding (generate.py's `Lmlab` / `LlamaCpp`), as this process's last
    line."""
    import time

    import torch

    from generate import PROMPT, LlamaCpp, Lmlab
    from lmlab.generation.threads import pin_threads

    path = downloaded(MODEL)
    ours = Lmlab(path, torch.device("cpu"), "int4")
    ours.load()  # its tokenizer gives both sides the prompt's ids (the same vocabulary)
    if "pinned" in side:
        pin_threads(2)
    impl = LlamaCpp(path, 256) if side.startswith("llama.cpp") else ours
    if impl is not ours:
        impl.load()
    ids = ours.tokenizer.encode(PROMPT)
    impl.decode([ids], 4)  # warm
    speeds = []
    for _ in range(repeats):
        start = time.perf_counter()
        impl.decode([ids], new_tokens)
        speeds.append(new_tokens / (time.perf_counter() - start))
    print(json.dumps({"tokens_per_s": statistics.median(speeds), "torch_threads": torch.get_num_threads()}))


def measure(side: str, policy: str, args) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")} | POLICIES[policy]
    out = subprocess.run([sys.executable, __file__, "--child", side, "--new-tokens", str(args.new_tokens),
                          "--repeats", str(args.repeats)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["tokens_per_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--contention", type=int, default=1, help="busy processes in the second phase")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child, args.new_tokens, args.repeats)
    pairs = [(side, policy) for policy in POLICIES for side in SIDES]
    load_before = os.getloadavg()[0]
    results = {}
    for phase, busy in (("quiet", 0), (f"{args.contention} busy", args.contention)):
        runs = {pair: [] for pair in pairs}
        with busy_processes(busy):
            for _, pair in alternating(pairs, args.rounds):
                runs[pair].append(measure(*pair, args))
        results[phase] = {f"{side} | {policy}": statistics.median(v) for (side, policy), v in runs.items()}
    print(f"decode batch 1, SmolLM2-135M Q4_1, {args.new_tokens} tokens, median of {args.rounds} rounds x "
          f"{args.repeats}; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"{'(tokens/s)':<34}" + "".join(f"{p:>26}" for p in POLICIES))
    for phase, values in results.items():
        for side in SIDES:
            print(f"{phase + ', ' + side:<34}" + "".join(f"{values[f'{side} | {p}']:>26.1f}" for p in POLICIES))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"settings": vars(args) | {"out": str(args.out)}, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

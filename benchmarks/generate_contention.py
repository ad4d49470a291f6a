"""Decode speed at batch 1, quiet and beside busy processes (`python benchmarks/generate.py --decode-only
--contention N`): the part of generate.py's run that the issue about shared machines asks for, in minutes.

The same sides as generate.py (lmlab int4 (as lmlab loads the GGUF file by default: activations rounded to int8
as llama.cpp rounds them; and "a32": with fp32 activations) / int8 / fp32, HF transformers, llama.cpp on the
same GGUF file, each
loaded once), the same prompt and greedy decoding of --new-tokens; rounds interleave the sides, first on a quiet
machine, then while --contention N processes of the benchmark's own keep cores busy. For each side it reports the
median, the worst and the spread (best / worst) of the quiet rounds, the median beside the busy processes and
the share of its quiet speed kept, which kernels it ran, and on how many threads: lmlab picks its count per step
from the steps' timings (generation/threads.py), so its steps per thread count are printed; the others run on the
count they were given (--threads, else torch's).
"""

import json
import os
import platform
import statistics
from pathlib import Path

import torch

from generate import HF, MODEL, PROMPT, LlamaCpp, Lmlab, interleaved, llama_cpp_installed, thread_settings, timed
from machine import busy_processes, device_name, downloaded  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "generate_contention.json"


def run_contention(args) -> None:
    """Measure, print the table and write the JSON (args.out unless it is generate.py's own default)."""
    device = torch.device("cpu")
    path = downloaded(MODEL)
    impls = [Lmlab(path, device, dtype) for dtype in ("int4", "int4 a32", "int8", "fp32")] + [HF(path, device)]
    if llama_cpp_installed():
        impls.append(LlamaCpp(path, args.new_tokens + 64))
    load_before = os.getloadavg()[0]
    for impl in impls:
        impl.load()
    prompt = impls[0].tokenizer.encode(PROMPT)
    for impl in impls:  # warm-up: first calls allocate, lay out weights and pick kernels
        impl.decode([prompt], 4)
    thread_settings(impls)  # forget the warm-up's steps

    def tokens_per_s(impl) -> float:
        return args.new_tokens / timed(lambda: impl.decode([prompt], args.new_tokens), device)[0]

    rounds = {"quiet": interleaved(impls, tokens_per_s, args.rounds)}
    threads = {"quiet": thread_settings(impls)}
    if args.contention:
        with busy_processes(args.contention):
            rounds["busy"] = interleaved(impls, tokens_per_s, args.rounds)
        threads["busy"] = thread_settings(impls)
    results = {impl.name: {"kernels": impl.kernels(), "threads": {k: v[impl.name] for k, v in threads.items()},
                           **{f"rounds_{k}_tokens_per_s": v[impl.name] for k, v in rounds.items()}}
               for impl in impls}
    machine = {"cpu": device_name(device), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
               "torch": torch.__version__, "python": platform.python_version(),
               "load_average_1min": [load_before, os.getloadavg()[0]]}
    print_table(results, machine, args)
    out = RESULTS if args.out.name == "generate.json" else args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "settings": {"model": MODEL, "new_tokens": args.new_tokens,
                                                                "rounds": args.rounds, "contention": args.contention},
                               "results": results}, indent=2))
    print(f"wrote {out}")


def print_table(results: dict, machine: dict, args) -> None:
    print(f"SmolLM2-135M-Instruct, decode batch 1, {args.new_tokens} new tokens, {args.rounds} interleaved rounds; "
          f"{machine['cpu']}, {machine['cores']} cores, {machine['torch_threads']} torch threads; load average "
          f"{machine['load_average_1min'][0]:.1f} before, {machine['load_average_1min'][1]:.1f} after")
    names = list(results)
    print(f"{'(tokens/s)':<34}" + "".join(f"{n:>15}" for n in names))

    def row(label: str, value) -> None:
        print(f"{label:<34}" + "".join(f"{value(results[n]):>15.2f}" for n in names))

    row("quiet, median", lambda r: statistics.median(r["rounds_quiet_tokens_per_s"]))
    row("quiet, worst", lambda r: min(r["rounds_quiet_tokens_per_s"]))
    row("quiet, spread (best / worst)", lambda r: max(r["rounds_quiet_tokens_per_s"]) / min(r["rounds_quiet_tokens_per_s"]))
    if args.contention:
        row(f"beside {args.contention} busy, median", lambda r: statistics.median(r["rounds_busy_tokens_per_s"]))
        row(f"beside {args.contention} busy, worst", lambda r: min(r["rounds_busy_tokens_per_s"]))
        row("  share of quiet speed kept", lambda r: statistics.median(r["rounds_busy_tokens_per_s"])
            / statistics.median(r["rounds_quiet_tokens_per_s"]))
    for side in ("lmlab int4", "lmlab int4 a32") if "llama.cpp" in results else ():
        ours, theirs = results[side], results["llama.cpp"]
        for phase in ("quiet", "busy") if args.contention else ("quiet",):
            a, b = ours[f"rounds_{phase}_tokens_per_s"], theirs[f"rounds_{phase}_tokens_per_s"]
            paired = [x / y for x, y in zip(a, b)]
            print(f"{side} / llama.cpp, {phase}: median {statistics.median(a) / statistics.median(b):.2f}x, "
                  f"worst round {min(a) / min(b):.2f}x, paired rounds {min(paired):.2f}-{max(paired):.2f}x")
    print("kernels, and threads (lmlab: decoding steps per thread count):")
    for name, r in results.items():
        print(f"  {name}: {r['kernels']}; " + "; ".join(f"{k}: {v}" for k, v in r["threads"].items()))

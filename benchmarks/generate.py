"""Generation speed: lmlab versus Hugging Face transformers on SmolLM2-135M-Instruct, same weights, fp32.

Both sides read the zoo's GGUF file (`lmlab download smollm2-135m-instruct`): lmlab through
`lmlab.load` (converted once, then memory-mapped from its cache), transformers through
`from_pretrained(dir, gguf_file=...)`, which dequantizes it to the same fp32 weights. Measured:

  load       seconds until the model is ready: lmlab from its warm cache (and, once, the first-time
             conversion into an empty cache); transformers from the GGUF file.
  prefill    prompt tokens/s for one 512-token prompt, as generation runs it: fill an empty KV cache
             and compute the last position's logits.
  decode     new tokens/s of greedy generation (the whole call: a short prompt's prefill, then one
             token per step), at batch 1 and batch 8 (eight prompts of different lengths, left-padded).
             Neither side stops at end-of-sequence, so both generate exactly --new-tokens per row;
             the batch-1 greedy tokens must be identical, and the run says whether they are.

llama.cpp (llama-cpp-python) is timed on the same GGUF when it is installed: it runs the Q4_1
weights themselves, so its tokens may differ and it reads ~5x fewer bytes per token. Repetitions
interleave the implementations (alternating their order) and each reports its median, so a noisy
shared machine slows all alike. Usage:

  python benchmarks/generate.py                    # CPU, 128 new tokens, 3 rounds
  python benchmarks/generate.py --quick            # a smoke test, not a benchmark
  python benchmarks/generate.py --threads 1        # steadier on a machine other jobs share
  python benchmarks/generate.py --device cuda --new-tokens 256
"""

import argparse
import importlib.util
import json
import os
import platform
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import transformers

from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.batch import new_cache
from lmlab.generation.decode import last_logits
from lmlab.models.load import load

from machine import alternating, device_name, downloaded, synchronize  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "generate.json"
MODEL = "smollm2-135m-instruct"
PROMPT = "Once upon a time, in a small village at the edge of a great forest,"
BATCH_PROMPTS = [  # eight lengths, so the batch is left-padded
    PROMPT,
    "The three laws of thermodynamics are",
    "def quicksort(xs):",
    "A recipe for bread: mix flour, water, salt and yeast, then",
    "Paris is",
    "In 1969 the first humans walked on the Moon. The mission, called Apollo 11,",
    "Dear diary, today",
    "The most important idea in computer science is",
]
PREFILL_TEXT = ("Rivers shape the land they cross. A young river runs fast and straight, cutting deep valleys; "
                "as the land flattens the water slows and drops its stones, then gravel, sand and silt. ")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--new-tokens", type=int, default=128, help="greedy tokens generated per row")
    p.add_argument("--prefill-tokens", type=int, default=512, help="prompt length of the prefill measurement")
    p.add_argument("--rounds", type=int, default=3, help="interleaved repetitions; the median is kept")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's choice); on a busy shared machine 1 is steadier")
    p.add_argument("--quick", action="store_true", help="few tokens, one round: a smoke test, not a benchmark")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda asked for but CUDA is not available")
    if args.new_tokens < 2:
        p.error(f"--new-tokens {args.new_tokens} must be at least 2")
    if args.quick:
        args.new_tokens, args.prefill_tokens, args.rounds = 8, 64, 1
    return args


def timed(fn, device: torch.device) -> tuple[float, object]:
    """(seconds, result) of fn()."""
    synchronize(device)
    t0 = time.perf_counter()
    result = fn()
    synchronize(device)
    return time.perf_counter() - t0, result


@contextmanager
def lmlab_cache(path: str):
    """Point the lmlab cache at `path` for a while (to time a first-time conversion)."""
    before = os.environ.get("LMLAB_CACHE")
    os.environ["LMLAB_CACHE"] = path
    try:
        yield
    finally:
        if before is None:
            del os.environ["LMLAB_CACHE"]
        else:
            os.environ["LMLAB_CACHE"] = before


class Lmlab:
    """lmlab's own entry points: `load`, the generation prefill (`last_logits`), `generate_batch`."""

    name = "lmlab"

    def __init__(self, path: Path, device: torch.device):
        self.path, self.device = path, device

    def load(self):
        model, self.tokenizer = load(self.path)
        self.model = model.to(self.device)

    @torch.inference_mode()
    def prefill(self, ids: list[int]) -> None:
        ids = torch.tensor([ids], device=self.device)  # (1, T)
        last_logits(self.model, ids, None, new_cache(self.model, 1, ids.size(1)))

    def decode(self, prompts: list[list[int]], n: int) -> list[list[int]]:
        return [g.token_ids for g in generate_batch(self.model, prompts, GenerationConfig(max_new_tokens=n))]


class HF:
    """What a transformers user writes: from_pretrained with gguf_file, model(...), model.generate(...)."""

    name = "hf"

    def __init__(self, path: Path, device: torch.device):
        self.path, self.device = path, device

    def load(self):
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            self.path.parent, gguf_file=self.path.name, dtype=torch.float32).to(self.device).eval()

    @torch.inference_mode()
    def prefill(self, ids: list[int]) -> None:
        self.model(torch.tensor([ids], device=self.device), use_cache=True, logits_to_keep=1)

    @torch.inference_mode()
    def decode(self, prompts: list[list[int]], n: int) -> list[list[int]]:
        T = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (T - len(p)) + p for p in prompts], device=self.device)  # (B, T), left-padded
        mask = torch.tensor([[0] * (T - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        out = self.model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False,
                                  eos_token_id=None, pad_token_id=0)  # no eos: exactly n new tokens
        return out[:, T:].tolist()


class LlamaCpp:
    """llama-cpp-python on the GGUF's own Q4_1 weights; one sequence at a time (no batch-8 decode)."""

    name = "llama.cpp"

    def __init__(self, path: Path, context: int):
        self.path, self.context = path, context

    def load(self):
        from llama_cpp import Llama
        self.model = Llama(model_path=str(self.path), n_ctx=self.context, n_batch=512,
                           n_threads=torch.get_num_threads(), verbose=False)

    def prefill(self, ids: list[int]) -> None:
        self.model.reset()
        self.model.eval(ids)

    def decode(self, prompts: list[list[int]], n: int) -> list[list[int]] | None:
        if len(prompts) > 1:
            return None
        tokens = []
        for token in self.model.generate(prompts[0], temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
            tokens.append(token)
            if len(tokens) == n:
                return [tokens]
        return [tokens]


def llama_cpp_installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def time_loads(ours: Lmlab, others: list, rounds: int, device: torch.device) -> dict[str, dict]:
    """Load every implementation (their models stay loaded); lmlab's cached load `rounds` times, and
    its first-time conversion once, into an empty cache."""
    loads = {ours.name: {"cached_s": [timed(ours.load, device)[0]]}}
    for impl in others:  # once: transformers takes tens of seconds
        loads[impl.name] = {"s": [timed(impl.load, device)[0]]}
    with tempfile.TemporaryDirectory(prefix="lmlab-cache-") as empty, lmlab_cache(empty):
        loads[ours.name]["first_time_conversion_s"] = timed(ours.load, device)[0]
    loads[ours.name]["cached_s"] += [timed(ours.load, device)[0] for _ in range(rounds - 1)]
    for load_times in loads.values():
        key = "cached_s" if "cached_s" in load_times else "s"
        load_times["median_s"] = statistics.median(load_times[key])
    return loads


def interleaved(impls: list, measure, rounds: int) -> dict[str, list]:
    """measure(impl) for every implementation, `rounds` times, alternating the order each round."""
    results = {impl.name: [] for impl in impls}
    for _, impl in alternating(impls, rounds):
        results[impl.name].append(measure(impl))
    return results


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where the token lists differ (or their lengths do); None if identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    args = parse_args()
    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    path = downloaded(MODEL)
    load_before = os.getloadavg()[0]  # other work on a shared machine skews every number; recorded to judge

    ours = Lmlab(path, device)
    impls = [ours, HF(path, device)]
    if llama_cpp_installed():
        impls.append(LlamaCpp(path, args.prefill_tokens + args.new_tokens + 64))
    loads = time_loads(ours, impls[1:], args.rounds, device)

    tokenizer = ours.tokenizer
    text_ids = tokenizer.encode(PREFILL_TEXT)
    prefill_ids = (text_ids * (args.prefill_tokens // len(text_ids) + 1))[:args.prefill_tokens]  # repeated to length
    prompt = tokenizer.encode(PROMPT)
    batch = [tokenizer.encode(text) for text in BATCH_PROMPTS]
    for impl in impls:  # warm-up: first calls allocate and pick kernels
        impl.prefill(prefill_ids[:64])
    prefill_s = interleaved(impls, lambda impl: timed(lambda: impl.prefill(prefill_ids), device)[0], args.rounds)
    decoded = {}  # (impl, batch size) -> the tokens of the last round

    def decode(impl, prompts: list[list[int]]) -> float | None:
        seconds, tokens = timed(lambda: impl.decode(prompts, args.new_tokens), device)
        decoded[impl.name, len(prompts)] = tokens
        if tokens is None:
            return None
        assert all(len(row) == args.new_tokens for row in tokens), (impl.name, [len(row) for row in tokens])
        return len(prompts) * args.new_tokens / seconds

    def decode_rounds(prompts: list[list[int]]) -> dict[str, list]:
        for impl in impls:  # warm-up at this batch size (lmlab also lays out its weights for it)
            impl.decode(prompts, 2)
        return interleaved(impls, lambda impl: decode(impl, prompts), args.rounds)

    decode_1, decode_8 = decode_rounds([prompt]), decode_rounds(batch)

    def median(values: list) -> float | None:
        return statistics.median(values) if None not in values else None

    results = {}
    for impl in impls:
        rows_8 = decoded[impl.name, 8]
        results[impl.name] = {
            "load": loads[impl.name],
            "prefill_tokens_per_s": median([args.prefill_tokens / s for s in prefill_s[impl.name]]),
            "rounds_prefill_s": prefill_s[impl.name],
            "decode_batch1_tokens_per_s": median(decode_1[impl.name]),
            "rounds_decode_batch1_tokens_per_s": decode_1[impl.name],
            "decode_batch8_tokens_per_s": median(decode_8[impl.name]),
            "rounds_decode_batch8_tokens_per_s": decode_8[impl.name],
            "batch1_first_difference_from_hf": first_difference(decoded[impl.name, 1][0], decoded["hf", 1][0]),
            "batch8_rows_identical_to_hf": (sum(a == b for a, b in zip(rows_8, decoded["hf", 8]))
                                            if rows_8 is not None else None),
            "batch1_text": tokenizer.decode(decoded[impl.name, 1][0]),
        }
    identical = results["lmlab"]["batch1_first_difference_from_hf"] is None

    print(f"SmolLM2-135M-Instruct fp32, {device_name(device)} ({args.device}), {torch.get_num_threads()} torch "
          f"threads, torch {torch.__version__}, transformers {transformers.__version__}; prefill {args.prefill_tokens} "
          f"tokens, decode {args.new_tokens} new tokens, median of {args.rounds} interleaved rounds")
    columns = [impl.name for impl in impls]
    print(f"{'':<26}" + "".join(f"{c:>12}" for c in columns) + f"{'vs HF':>10}")

    def row(label: str, values: dict[str, float | None], fmt: str, higher_is_better: bool = True) -> None:
        cells = "".join(f"{format(values[c], fmt) if values.get(c) is not None else 'n/a':>12}" for c in columns)
        ratio = values["lmlab"] / values["hf"] if higher_is_better else values["hf"] / values["lmlab"]
        print(f"{label:<26}{cells}{ratio:>9.2f}x")

    print(f"{'load, first time (s)':<26}{loads['lmlab']['first_time_conversion_s']:>12.2f}"
          + "".join(f"{'':>12}" for _ in columns[1:]))
    row("load (s)", {name: r["load"]["median_s"] for name, r in results.items()}, ".2f", higher_is_better=False)
    row("prefill (tokens/s)", {name: r["prefill_tokens_per_s"] for name, r in results.items()}, ".0f")
    row("decode batch 1 (tokens/s)", {name: r["decode_batch1_tokens_per_s"] for name, r in results.items()}, ".1f")
    row("decode batch 8 (tokens/s)", {name: r["decode_batch8_tokens_per_s"] for name, r in results.items()}, ".1f")
    print(f"greedy tokens at batch 1: {'identical' if identical else 'DIFFERENT'} to HF over {args.new_tokens} tokens"
          + ("" if identical else f" (first difference at token {results['lmlab']['batch1_first_difference_from_hf']})")
          + f"; batch 8: {results['lmlab']['batch8_rows_identical_to_hf']}/8 rows identical")
    print("vs HF: how many times faster lmlab is (for load: HF's seconds / lmlab's)")
    if "llama.cpp" not in results:
        print("llama.cpp: not installed (pip install llama-cpp-python), column skipped")

    machine = {"device": str(device), "device_name": device_name(device), "cpu_count": os.cpu_count(),
               "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
               "transformers": transformers.__version__, "python": platform.python_version(),
               "load_average_1min": [load_before, os.getloadavg()[0]]}
    settings = {"model": MODEL, "gguf": path.name, "dtype": "fp32", "new_tokens": args.new_tokens,
                "prefill_tokens": args.prefill_tokens, "batch_prompt_lengths": [len(p) for p in batch],
                "batch1_prompt_length": len(prompt), "rounds": args.rounds, "quick": args.quick,
                "llama_cpp": "installed" if "llama.cpp" in results else "not installed, skipped"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "settings": settings, "batch1_identical_to_hf": identical,
                                    "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

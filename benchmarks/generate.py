"""Generation speed: lmlab (fp32, int8, int4, compiled fp32) versus transformers and llama.cpp on
SmolLM2-135M-Instruct, all from the same GGUF file.

Every side reads the zoo's GGUF file (`lmlab download smollm2-135m-instruct`): lmlab through
`lmlab.load` (converted once, then memory-mapped from its cache) as fp32 (the default: the file's blocks
dequantized), int8 and int4 (`lmlab.load(path, "int4")`: the file's Q4_1 blocks kept as int4 and its
Q8_0 embedding / tied LM head as int8; "int8" re-quantizes the Q4_1 matrices to int8 per channel),
transformers through `from_pretrained(dir, gguf_file=...)`, which dequantizes it to the same fp32
weights. Measured:

  load       seconds until the model is ready in a fresh process (what a command pays): lmlab from its
             warm cache, transformers and llama.cpp from the GGUF file; and, once, lmlab's first-time
             conversion into an empty cache.
  memory     resident memory (RSS) of that fresh process once it loaded the model and generated 8 tokens,
             and how much of it the model added (RSS minus that of the same process before loading, which
             holds Python, torch and the libraries: for lmlab its C++ kernel library loaded, built if need
             be (`kernel_ops()`), as llama.cpp's holds `import llama_cpp` and its C++ library). Both are
             medians over --rounds subprocesses per implementation.
  prefill    prompt tokens/s for one 512-token prompt, as generation runs it: fill an empty KV cache
             and compute the last position's logits.
  decode     new tokens/s of greedy generation (the whole call: a short prompt's prefill, then one
             token per step), at batch 1 and batch 8 (eight prompts of different lengths, left-padded).
             No side stops at end-of-sequence, so all generate exactly --new-tokens per row; the run
             says whether each one's batch-1 greedy tokens are identical to HF's.
  contended  with --contention N: decode batch 1 again while N busy processes of the benchmark's own keep cores
             busy (interleaved rounds as quiet), and how much of its quiet speed each side kept; lmlab picks its
             thread count per step from the steps' timings (generation/threads.py), and the run prints how many
             steps each side ran on how many threads, and which kernels (lmlab's instruction set, llama.cpp's
             build flags).
  compile    for "compiled fp32" (`compiled_decoder`, torch.compile of the decoding step): seconds
             of the first 2-token generation at batch 1 and at batch 8, each of which compiles the step
             once (from inductor's on-disk cache, ~/.cache/lmlab/inductor, when an earlier run left it warm).

llama.cpp (llama-cpp-python, the `bench` extra, built from source) is timed on the same GGUF when it is
installed: it runs the Q4_1 weights themselves (as lmlab int4 does). On a CPU with AMX, llama-cpp-python
0.3.36 built as it comes (-march=native) crashed in its AMX matmul (ggml_backend_amx_mul_mat) on our VM;
build it for AVX-512 instead:
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
  -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON"
  pip install --force-reinstall --no-deps llama-cpp-python
Repetitions interleave the
implementations (alternating their order) and each reports its median, so a noisy shared machine slows
all alike; the load average before and after is recorded. Usage:

  python benchmarks/generate.py                    # CPU, 128 new tokens, 3 rounds
  python benchmarks/generate.py --quick            # a smoke test, not a benchmark
  python benchmarks/generate.py --rounds 5 --contention 1   # quiet and beside one busy process
  python benchmarks/generate.py --decode-only --rounds 5 --contention 1   # only that, batch 1, in minutes
                                                      # (generate_contention.py; writes generate_contention.json)
  python benchmarks/generate.py --threads 1        # steadier on a machine other jobs share
  python benchmarks/generate.py --device cuda --new-tokens 256
  python benchmarks/generate.py --families --threads 1 # decode per family at int4: fused, modules, llama.cpp
                                                      # (generate_families.py; writes generate_families.json)
"""

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch

import lmlab.generation.decode as decoding
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.batch import new_cache
from lmlab.generation.compiled import compiled_decoder
from lmlab.generation.decode import last_logits
from lmlab.models.load import load
from lmlab.modules.kernels.build import kernel_ops
from machine import alternating, busy_processes, device_name, downloaded, synchronize  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "generate.json"
LMLAB_DTYPES = ("fp32", "int8", "int4", "int4 a32")  # a32: fp32 activations, not the GGUF default of rounded int8
COMPILED_DTYPES = ("fp32",)  # a quantized Llama decodes through its fused C++ step, compiled view or not
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
    p.add_argument("--contention", type=int, default=0, metavar="N",
                   help="also decode batch 1 beside N busy processes of the benchmark's own (default: quiet only)")
    p.add_argument("--quick", action="store_true", help="few tokens, one round: a smoke test, not a benchmark")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--families", action="store_true",
                   help="instead: decode tokens/s per family at int4 (lmlab fused, lmlab modules, llama.cpp on one "
                        "GGUF file each; generate_families.py)")
    p.add_argument("--family", action="append", help="with --families: only this family (repeatable)")
    p.add_argument("--decode-only", action="store_true",
                   help="instead: decode batch 1 only, quiet and with --contention, in minutes (generate_contention.py; "
                        "writes generate_contention.json)")
    p.add_argument("--rss", metavar="IMPL", help=argparse.SUPPRESS)  # the child process of `fresh_process`
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
    """lmlab's own entry points: `load` (as `dtype`), the generation prefill (`last_logits`), `generate_batch`.
    The quantized dtypes load with `load`'s default activations: on the GGUF file, each matrix's input rounded
    to int8 as llama.cpp rounds it, the products taken on integers; a dtype ending in " a32" loads with
    `activations="fp32"` (the kernels multiply fp32 activations)."""

    def __init__(self, path: Path, device: torch.device, dtype: str = "fp32"):
        self.path, self.device = path, device
        self.dtype, self.activations = dtype.removesuffix(" a32"), "fp32" if dtype.endswith(" a32") else None
        self.name = "lmlab" if dtype == "fp32" else f"lmlab {dtype}"
        self.thread_steps = Counter()  # thread count -> decoding steps run on it, since the last `took_threads`

    def load(self):
        model, self.tokenizer = load(self.path, self.dtype, activations=self.activations)
        self.model = model.to(self.device)
        self.rounded = any(getattr(layer, "activations", None) for layer in model.modules())

    @torch.inference_mode()
    def prefill(self, ids: list[int]) -> None:
        ids = torch.tensor([ids], device=self.device)  # (1, T)
        last_logits(self.model, ids, None, new_cache(self.model, 1, ids.size(1)))

    def decode(self, prompts: list[list[int]], n: int) -> list[list[int]]:
        with thread_tuners() as tuners:
            generations = generate_batch(self.model, prompts, GenerationConfig(max_new_tokens=n))
        for tuner in tuners:
            self.thread_steps.update(getattr(tuner, "steps", {torch.get_num_threads(): n - 1}))
        return [g.token_ids for g in generations]

    def took_threads(self) -> dict[int, int]:
        """Steps per thread count since the last call."""
        steps, self.thread_steps = dict(sorted(self.thread_steps.items(), reverse=True)), Counter()
        return steps

    def kernels(self) -> str:
        if self.dtype == "fp32":
            return "torch (MKL) on the decoding layout"
        isa = ("plain C++", "AVX2", "AVX-512")[kernel_ops().set_isa(2)]
        products = "8-bit integer activations (VNNI)" if self.rounded and isa == "AVX-512" else (
            "8-bit integer activations" if self.rounded else "fp32 activations")
        return f"lmlab's {self.dtype} kernels ({isa}, {products}), the fused C++ step"


@contextmanager
def thread_tuners():
    """The thread tuners the decoding loop makes while the block runs (to report how many threads it ran on)."""
    made, original = [], decoding.step_threads

    def recorded(*args):
        made.append(original(*args))
        return made[-1]

    decoding.step_threads = recorded
    try:
        yield made
    finally:
        decoding.step_threads = original


class CompiledLmlab(Lmlab):
    """lmlab as `dtype` with its decoding steps compiled: `compiled_decoder(model)`."""

    def __init__(self, path: Path, device: torch.device, dtype: str):
        super().__init__(path, device, dtype)
        self.name = f"compiled {dtype}"

    def load(self):
        super().load()
        self.model = compiled_decoder(self.model)

    def kernels(self) -> str:
        return "torch.compile'd step (inductor)"


class HF:
    """What a transformers user writes: from_pretrained with gguf_file, model(...), model.generate(...)."""

    name = "hf"

    def __init__(self, path: Path, device: torch.device):
        self.path, self.device = path, device

    def load(self):
        import transformers

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

    def kernels(self) -> str:
        return "torch (MKL)"


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

    def kernels(self) -> str:
        import llama_cpp

        flags = llama_cpp.llama_print_system_info().decode().split("|")
        return "ggml " + ", ".join(f.split("=")[0].strip().removeprefix("CPU : ") for f in flags if "= 1" in f)


def llama_cpp_installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def load_all(ours: list[Lmlab], others: list, device: torch.device) -> dict[str, float]:
    """Load every implementation (their models stay loaded for the rest of the run); return the seconds of
    lmlab's first-time conversions (into an empty cache, once each)."""
    for impl in [*ours, *others]:
        impl.load()
    conversions = {}
    with tempfile.TemporaryDirectory(prefix="lmlab-cache-") as empty, lmlab_cache(empty):
        for impl in ours:
            if not isinstance(impl, CompiledLmlab):  # the same conversion as its eager twin's
                conversions[impl.name] = timed(impl.load, device)[0]
    for impl in ours:
        impl.load()  # from the warm cache again
    return conversions


def fresh_processes(impls: list, args: argparse.Namespace) -> dict[str, dict]:
    """Load time and resident memory of each implementation in a fresh process (what a command pays),
    `rounds` times, alternating the order: {"load_s", "model_mib", "after_mib", ...: medians, "rounds": [...]}."""
    runs = {impl.name: [] for impl in impls}
    for _, impl in alternating(impls, args.rounds):
        runs[impl.name].append(fresh_process(impl.name, args))
    return {name: {key: statistics.median(run[key] for run in rounds) for key in rounds[0]} | {"rounds": rounds}
            for name, rounds in runs.items()}


def fresh_process(name: str, args: argparse.Namespace) -> dict[str, float]:
    """This script run again with --rss NAME: {"load_s", "before_mib", "after_mib", "model_mib"}."""
    command = [sys.executable, __file__, "--rss", name, "--device", args.device]
    if args.threads:
        command += ["--threads", str(args.threads)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def rss_mib() -> float:
    """This process's resident memory (MiB), from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure_rss(name: str, path: Path, device: torch.device) -> None:
    """Print {"load_s", "before_mib", "after_mib", "model_mib"} for implementation `name` (the --rss child)."""
    impl = {f"lmlab {d}" if d != "fp32" else "lmlab": lambda d=d: Lmlab(path, device, d) for d in LMLAB_DTYPES}
    impl |= {f"compiled {d}": lambda d=d: CompiledLmlab(path, device, d) for d in COMPILED_DTYPES}
    impl |= {"hf": lambda: HF(path, device), "llama.cpp": lambda: LlamaCpp(path, 256)}
    chosen = impl[name]()
    if name == "llama.cpp":
        import llama_cpp  # noqa: F401  (its import belongs to the baseline, as torch's does for the others)
    elif isinstance(chosen, Lmlab):
        kernel_ops()  # lmlab's C++ library, loaded once per process whatever the model: baseline, like llama_cpp's
    before = rss_mib()
    seconds = timed(chosen.load, device)[0]
    chosen.decode([[1, 2, 3, 4]], 8)  # every weight read once
    after = rss_mib()
    print(json.dumps({"load_s": seconds, "before_mib": before, "after_mib": after, "model_mib": after - before}))


def interleaved(impls: list, measure, rounds: int) -> dict[str, list]:
    """measure(impl) for every implementation, `rounds` times, alternating the order each round."""
    results = {impl.name: [] for impl in impls}
    for _, impl in alternating(impls, rounds):
        results[impl.name].append(measure(impl))
    return results


def thread_settings(impls: list) -> dict[str, str | dict[int, int]]:
    """How many threads each side decoded on since the last call: lmlab's steps per count (it tunes the count per
    step), the others' fixed setting."""
    settings = {}
    for impl in impls:
        if isinstance(impl, Lmlab):
            settings[impl.name] = impl.took_threads()
        elif isinstance(impl, LlamaCpp):
            settings[impl.name] = f"n_threads={impl.model.context_params.n_threads}"
        else:
            settings[impl.name] = f"torch threads={torch.get_num_threads()}"
    return settings


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where the token lists differ (or their lengths do); None if identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.families:
        from generate_families import run_families  # here: it imports this module's neighbours, not the zoo model
        return run_families(args)
    if args.decode_only:
        from generate_contention import run_contention  # here: it imports this module

        return run_contention(args)
    device = torch.device(args.device)
    path = downloaded(MODEL)
    if args.rss:
        return measure_rss(args.rss, path, device)
    import transformers  # here, not at the top: in a --rss child its 200k objects would slow lmlab's GC-bound load

    transformers.logging.set_verbosity_error()
    load_before = os.getloadavg()[0]  # other work on a shared machine skews every number; recorded to judge

    ours = [Lmlab(path, device, dtype) for dtype in LMLAB_DTYPES]
    ours += [CompiledLmlab(path, device, dtype) for dtype in COMPILED_DTYPES]
    impls = [*ours, HF(path, device)]
    if llama_cpp_installed():
        impls.append(LlamaCpp(path, args.prefill_tokens + args.new_tokens + 64))
    conversions = load_all(ours, impls[len(ours):], device)
    fresh = fresh_processes(impls, args)

    tokenizer = ours[0].tokenizer
    text_ids = tokenizer.encode(PREFILL_TEXT)
    prefill_ids = (text_ids * (args.prefill_tokens // len(text_ids) + 1))[:args.prefill_tokens]  # repeated to length
    prompt = tokenizer.encode(PROMPT)
    batch = [tokenizer.encode(text) for text in BATCH_PROMPTS]
    for impl in impls:  # warm-up: first calls allocate and pick kernels
        impl.prefill(prefill_ids[:64])
    prefill_s = interleaved(impls, lambda impl: timed(lambda: impl.prefill(prefill_ids), device)[0], args.rounds)
    decoded = {}  # (impl, batch size) -> the tokens of the last round
    compile_s = {impl.name: [] for impl in ours if isinstance(impl, CompiledLmlab)}  # the first call per batch size

    def decode(impl, prompts: list[list[int]]) -> float | None:
        seconds, tokens = timed(lambda: impl.decode(prompts, args.new_tokens), device)
        decoded[impl.name, len(prompts)] = tokens
        if tokens is None:
            return None
        assert all(len(row) == args.new_tokens for row in tokens), (impl.name, [len(row) for row in tokens])
        return len(prompts) * args.new_tokens / seconds

    def decode_rounds(prompts: list[list[int]]) -> dict[str, list]:
        for impl in impls:  # warm-up at this batch size (lmlab also lays out its weights for it, or compiles)
            seconds = timed(lambda impl=impl: impl.decode(prompts, 2), device)[0]
            if impl.name in compile_s:
                compile_s[impl.name].append(seconds)
        return interleaved(impls, lambda impl: decode(impl, prompts), args.rounds)

    decode_1 = decode_rounds([prompt])
    threads = {"quiet": thread_settings(impls)}
    decode_busy = {}
    if args.contention:
        with busy_processes(args.contention):
            decode_busy = interleaved(impls, lambda impl: decode(impl, [prompt]), args.rounds)
        threads[f"{args.contention} busy"] = thread_settings(impls)
    decode_8 = decode_rounds(batch)

    def median(values: list) -> float | None:
        return statistics.median(values) if None not in values else None

    results = {}
    for impl in impls:
        rows_8 = decoded[impl.name, 8]
        results[impl.name] = {
            "first_time_conversion_s": conversions.get(impl.name),
            "fresh_process": fresh[impl.name],
            "prefill_tokens_per_s": median([args.prefill_tokens / s for s in prefill_s[impl.name]]),
            "rounds_prefill_s": prefill_s[impl.name],
            "decode_batch1_tokens_per_s": median(decode_1[impl.name]),
            "rounds_decode_batch1_tokens_per_s": decode_1[impl.name],
            "decode_batch1_busy_tokens_per_s": median(decode_busy[impl.name]) if decode_busy else None,
            "rounds_decode_batch1_busy_tokens_per_s": decode_busy.get(impl.name),
            "kernels": impl.kernels(),
            "threads": {phase: settings[impl.name] for phase, settings in threads.items()},
            "decode_batch8_tokens_per_s": median(decode_8[impl.name]),
            "rounds_decode_batch8_tokens_per_s": decode_8[impl.name],
            "batch1_first_difference_from_hf": first_difference(decoded[impl.name, 1][0], decoded["hf", 1][0]),
            "batch8_rows_identical_to_hf": (sum(a == b for a, b in zip(rows_8, decoded["hf", 8]))
                                            if rows_8 is not None else None),
            "batch1_text": tokenizer.decode(decoded[impl.name, 1][0]),
        }
        if impl.name in compile_s:
            results[impl.name]["first_decode_with_compile_s"] = dict(zip(("batch1", "batch8"), compile_s[impl.name]))

    print(f"SmolLM2-135M-Instruct ({path.name}), {device_name(device)} ({args.device}), {torch.get_num_threads()} "
          f"torch threads, torch {torch.__version__}, transformers {transformers.__version__}; prefill "
          f"{args.prefill_tokens} tokens, decode {args.new_tokens} new tokens, median of {args.rounds} interleaved "
          f"rounds; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    columns = [impl.name for impl in impls]
    print(f"{'':<28}" + "".join(f"{c:>14}" for c in columns))

    def row(label: str, values: dict[str, float | None], fmt: str) -> None:
        print(f"{label:<28}" + "".join(f"{format(values[c], fmt) if values.get(c) is not None else 'n/a':>14}"
                                       for c in columns))

    row("load, first time (s)", conversions, ".2f")
    row("load (s)", {name: r["fresh_process"]["load_s"] for name, r in results.items()}, ".2f")
    row("prefill (tokens/s)", {name: r["prefill_tokens_per_s"] for name, r in results.items()}, ".0f")
    row("decode batch 1 (tokens/s)", {name: r["decode_batch1_tokens_per_s"] for name, r in results.items()}, ".1f")
    row(f"  worst of {args.rounds}", {name: min(r["rounds_decode_batch1_tokens_per_s"]) for name, r in results.items()},
        ".1f")
    row("  spread (best / worst)", {name: max(r["rounds_decode_batch1_tokens_per_s"])
                                    / min(r["rounds_decode_batch1_tokens_per_s"]) for name, r in results.items()},
        ".2f")
    if decode_busy:
        row(f"  beside {args.contention} busy (tokens/s)",
            {name: r["decode_batch1_busy_tokens_per_s"] for name, r in results.items()}, ".1f")
        row("  of its quiet speed kept (%)", {name: 100 * r["decode_batch1_busy_tokens_per_s"]
                                              / r["decode_batch1_tokens_per_s"] for name, r in results.items()}, ".0f")
    row("decode batch 8 (tokens/s)", {name: r["decode_batch8_tokens_per_s"] for name, r in results.items()}, ".1f")
    row("compile, batch 1 / 8 (s)", {name: f"{s[0]:.0f} / {s[1]:.0f}" for name, s in compile_s.items()}, "")
    row("RSS after load (MiB)", {name: r["fresh_process"]["after_mib"] for name, r in results.items()}, ".0f")
    row("  of which the model (MiB)", {name: r["fresh_process"]["model_mib"] for name, r in results.items()}, ".0f")
    row("batch 1 = HF's tokens", {name: "yes" if r["batch1_first_difference_from_hf"] is None
                                  else f"to {r['batch1_first_difference_from_hf']}" for name, r in results.items()}, "")
    print(f"GGUF file: {path.stat().st_size / 2**20:.0f} MiB; 'to N': the first N greedy tokens equal HF's")
    if "llama.cpp" in results:
        ours_int4, theirs = results["lmlab int4"], results["llama.cpp"]
        prefill = ours_int4["prefill_tokens_per_s"] / theirs["prefill_tokens_per_s"]
        decode = ours_int4["decode_batch1_tokens_per_s"] / theirs["decode_batch1_tokens_per_s"]
        load_speed = theirs["fresh_process"]["load_s"] / ours_int4["fresh_process"]["load_s"]
        worst = min(ours_int4["rounds_decode_batch1_tokens_per_s"]) / min(theirs["rounds_decode_batch1_tokens_per_s"])
        print(f"lmlab int4 vs llama.cpp: prefill {prefill:.2f}x, decode batch 1 {decode:.2f}x (worst rounds "
              f"{worst:.2f}x), load {load_speed:.2f}x (as fast; > 1: lmlab is faster)")
        if decode_busy:
            busy = ours_int4["decode_batch1_busy_tokens_per_s"] / theirs["decode_batch1_busy_tokens_per_s"]
            print(f"lmlab int4 vs llama.cpp beside {args.contention} busy processes: decode batch 1 {busy:.2f}x")
    else:
        print("llama.cpp: not installed (pip install 'lmlab[bench]' builds llama-cpp-python), column skipped")
    print("kernels and threads (decoding steps per thread count, batch 1):")
    for name, r in results.items():
        print(f"  {name}: {r['kernels']}; " + "; ".join(f"{phase}: {counts}" for phase, counts in r["threads"].items()))

    machine = {"device": str(device), "device_name": device_name(device), "cpu_count": os.cpu_count(),
               "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
               "transformers": transformers.__version__, "python": platform.python_version(),
               "load_average_1min": [load_before, os.getloadavg()[0]]}
    settings = {"model": MODEL, "gguf": path.name, "lmlab_dtypes": LMLAB_DTYPES, "compiled_dtypes": COMPILED_DTYPES,
                "new_tokens": args.new_tokens,
                "prefill_tokens": args.prefill_tokens, "batch_prompt_lengths": [len(p) for p in batch],
                "batch1_prompt_length": len(prompt), "rounds": args.rounds, "quick": args.quick,
                "contention": args.contention,
                "llama_cpp": "installed" if "llama.cpp" in results else "not installed, skipped"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Decode speed per family at int4: lmlab's fused C++ step (with fp32 activations, `activations="fp32"`, and
"a8": rounded to int8 as llama.cpp rounds them, lmlab's default for a quantized GGUF file), lmlab through its
modules, and llama.cpp, on one GGUF file per family (`python benchmarks/generate.py --families`).

Each family is SmolLM2-135M's shape (30 layers of width 576, 9 query and 3 key/value heads of 64, a 1536-wide
feed-forward, 49152 tokens) with the family's own settings on top (q/k/v biases, q/k norms, norm placement,
GeGLU, scales, soft-caps, windows: FAMILIES), so every row is the same amount of work as the Llama row, whose
SmolLM2 numbers the issue's >= 1.2x goal was set on. Random weights (transformers' model of the config, as the
parity tests build it, `tests/hf_models.py`), written as a GGUF file by llama.cpp's own converter
(convert_hf_to_gguf.py from the llama-cpp-python sdist, `tests/llama_cpp_converter.py`) and quantized by
llama.cpp's quantizer to Q4_0 (its default mix: the output matrix Q6_K); lmlab loads that file as int4
(`lmlab.load(path, "int4")`: the Q4_0 blocks kept as int4, the rest int8) and llama.cpp runs it. A family
whose GGUF lmlab does not read yet is loaded from the HF directory (quantized by lmlab, int4 groups of 32) and
its llama.cpp column is marked as another file's. Decoding: greedy, batch 1, --new-tokens after an
8-token prompt, no end-of-sequence; rounds interleaved as generate.py's, the median kept.
"""

import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import lmlab
import lmlab.generation.decode as decode
from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.fused import fused_step_refusal
from lmlab.models.presets import preset
from machine import alternating, device_name  # benchmarks/machine.py

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the test helpers that build and convert the models

RESULTS = Path(__file__).parent / "results" / "generate_families.json"
SHAPE = preset("smollm2-135m", context_length=2048)
# family -> its settings on SmolLM2's shape, as its published configs set them
FAMILIES = {
    "llama": {},
    "mistral": dict(sliding_window=4096, tie_embeddings=False),
    "qwen2": dict(qkv_bias=True, rope_base=1e6, norm_eps=1e-6),
    "qwen3": dict(qk_norm="head", rope_base=1e6, norm_eps=1e-6),
    "olmo2": dict(qk_norm="all", norm_placement="output", rope_base=5e5, norm_eps=1e-6, tie_embeddings=False),
    "phi3": dict(sliding_window=2047, tie_embeddings=False),
    "gemma2": dict(ffn="geglu", norm_placement="sandwich", norm_eps=1e-6, scale_embeddings=True,
                   attention_scale=64 ** -0.5, attention_softcap=50.0, logit_softcap=30.0, sliding_window=4096,
                   global_every=2),
    "gemma3": dict(ffn="geglu", norm_placement="sandwich", norm_eps=1e-6, qk_norm="head", scale_embeddings=True,
                   attention_scale=64 ** -0.5, sliding_window=512, global_every=6, rope_base=1e6, rope_local_base=1e4),
}
PROMPT = [7, 93, 41, 250, 12, 5, 300, 42]
def family_config(family: str) -> ModelConfig:
    return dataclasses.replace(SHAPE, family=family, **FAMILIES[family])


def written(family: str, root: Path) -> tuple[Path, Path]:
    """(HF directory, Q4_0 GGUF file) of a random-weight model of `family` on SmolLM2's shape."""
    import llama_cpp

    from hf_models import hf_model
    from llama_cpp_converter import convert_hf_to_gguf, extracted_converter, tokenizer_files

    converter = root / "llama.cpp" / "convert_hf_to_gguf.py"
    if not converter.is_file():
        extracted_converter(root / "llama.cpp")
    hf_dir, f32, q4 = root / family, root / f"{family}-f32.gguf", root / f"{family}-q4_0.gguf"
    model = hf_model(family_config(family))
    model.config.bos_token_id, model.config.eos_token_id = 1, 2  # inside the vocabulary (OLMo 2's default is not)
    model.save_pretrained(hf_dir)
    tokenizer_files(family, hf_dir, root, SHAPE.vocab_size)
    convert_hf_to_gguf(converter, hf_dir, f32, pre="gpt-2")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    if llama_cpp.llama_model_quantize(str(f32).encode(), str(q4).encode(), params) != 0:
        raise RuntimeError(f"llama.cpp could not quantize {f32}")
    f32.unlink()
    return hf_dir, q4


class Lmlab:
    """lmlab's int4 model decoding through the fused step, or (fused=False) through its modules; `name` says
    which, and whether its activations are rounded to int8 as llama.cpp rounds them (" a8")."""

    def __init__(self, model, fused: bool, name: str):
        self.model, self.fused, self.name = model, fused, name

    def decode(self, n: int) -> list[int]:
        with torch.inference_mode():
            if self.fused:
                return generate_batch(self.model, [PROMPT], GenerationConfig(max_new_tokens=n))[0].token_ids
            real = decode.fused_step
            decode.fused_step = lambda model: None
            try:
                return generate_batch(self.model, [PROMPT], GenerationConfig(max_new_tokens=n))[0].token_ids
            finally:
                decode.fused_step = real


class LlamaCpp:
    name = "llama.cpp"

    def __init__(self, path: Path):
        from llama_cpp import Llama
        self.model = Llama(model_path=str(path), n_ctx=256, n_batch=64, n_threads=torch.get_num_threads(),
                           verbose=False)

    def decode(self, n: int) -> list[int]:
        tokens = []
        for token in self.model.generate(PROMPT, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
            tokens.append(token)
            if len(tokens) == n:
                break
        return tokens


def measure(family: str, root: Path, args) -> dict:
    """Decode tokens/s of each side on `family`'s file, and how lmlab read it."""
    hf_dir, path = written(family, root)
    try:
        model, _ = lmlab.load(path, "int4", activations="fp32")
        rounded, _ = lmlab.load(path, "int4")
        source = "the GGUF file"
    except LmlabError as error:  # lmlab does not read this family's GGUF yet: the same weights from HF
        model, _ = lmlab.load(hf_dir, "int4", activations="fp32")
        rounded, _ = lmlab.load(hf_dir, "int4", activations="int8")
        source = f"the HF directory (lmlab int4 groups of 32; its GGUF: {str(error)[:120]})"
    sides = [Lmlab(model, True, "lmlab fused"), Lmlab(rounded, True, "lmlab fused a8"),
             Lmlab(model, False, "lmlab modules")]
    try:
        sides.append(LlamaCpp(path))
        llama_cpp = None
    except ValueError as error:  # llama.cpp refuses the file (its vocabulary checks): lmlab's sides only
        llama_cpp = str(error)
    for side in sides:
        side.decode(4)  # warm-up
    speeds = {side.name: [] for side in sides}
    for _, side in alternating(sides, args.rounds):
        t0 = time.perf_counter()
        tokens = side.decode(args.new_tokens)
        assert len(tokens) == args.new_tokens, (side.name, len(tokens))
        speeds[side.name].append(args.new_tokens / (time.perf_counter() - t0))
    shutil.rmtree(hf_dir)
    path.unlink()
    medians = {name: statistics.median(values) for name, values in speeds.items()}
    return {"lmlab_read": source, "refusal": fused_step_refusal(model), "llama_cpp_error": llama_cpp,
            "tokens_per_s": medians, "rounds": speeds,
            "fused_vs_llama_cpp": medians["lmlab fused"] / medians["llama.cpp"] if "llama.cpp" in medians else None,
            "fused_a8_vs_llama_cpp": (medians["lmlab fused a8"] / medians["llama.cpp"] if "llama.cpp" in medians
                                      else None),
            "fused_vs_modules": medians["lmlab fused"] / medians["lmlab modules"]}


def run_families(args) -> None:
    """Measure every family of FAMILIES (or --family ones), print the table and write the JSON."""
    import os

    import llama_cpp  # noqa: F401  (required: the comparison is the point)

    if args.threads:
        torch.set_num_threads(args.threads)
    chosen = args.family or list(FAMILIES)
    load_before = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory(prefix="lmlab-families-") as tmp:
        for family in chosen:
            try:
                results[family] = measure(family, Path(tmp), args)
            except Exception as error:  # a family that cannot be built or converted yet: said, not fatal
                results[family] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
            print(family, json.dumps(results[family].get("tokens_per_s", results[family])), flush=True)
    cpu = device_name(torch.device("cpu"))
    print(f"\nDecode at batch 1, int4, SmolLM2-135M's shape with each family's settings, random weights; {cpu}, "
          f"{torch.get_num_threads()} threads, {args.new_tokens} new tokens, median of {args.rounds} interleaved "
          f"rounds; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after (a shared machine: noisy)")
    print(f"{'family':<10}{'lmlab fused':>13}{'fused a8':>10}{'lmlab modules':>15}{'llama.cpp':>11}"
          f"{'fused/llama.cpp':>17}{'a8/llama.cpp':>14}{'fused/modules':>15}  lmlab read")
    for family, r in results.items():
        if "error" in r:
            print(f"{family:<10}  not measured: {r['error']}")
            continue
        t, ratio, ratio_a8 = r["tokens_per_s"], r["fused_vs_llama_cpp"], r["fused_a8_vs_llama_cpp"]
        theirs = (f"{t['llama.cpp']:>11.1f}{ratio:>16.2f}x{ratio_a8:>13.2f}x" if ratio is not None
                  else f"{'n/a':>11}{'n/a':>17}{'n/a':>14}")  # llama.cpp refused the file (llama_cpp_error)
        print(f"{family:<10}{t['lmlab fused']:>13.1f}{t['lmlab fused a8']:>10.1f}{t['lmlab modules']:>15.1f}{theirs}"
              f"{r['fused_vs_modules']:>14.2f}x  {r['lmlab_read'][:60]}")
    machine = {"cpu": cpu, "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
               "load_average_1min": [load_before, os.getloadavg()[0]]}
    settings = {"shape": dataclasses.asdict(SHAPE), "families": FAMILIES, "new_tokens": args.new_tokens,
                "rounds": args.rounds, "prompt_length": len(PROMPT)}
    out = args.out if args.out.name != "generate.json" else RESULTS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2))
    print(f"wrote {out}")

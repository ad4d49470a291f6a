"""Quality of lmlab's quantized modes on SmolLM2-135M-Instruct: perplexity on held-out text and greedy
continuations, each against the fp32 model of the same GGUF file.

Modes: fp32 (the GGUF dequantized), bf16, int4 and int8 straight from the GGUF (Q4_1 blocks kept as int4 with
"int4", Q8_0 kept as int8, the Q4_1 matrices re-quantized to int8 in groups of 32 with "int8") with fp32
activations, int4 as lmlab runs the file by default (activations rounded to 8 bits as llama.cpp rounds them),
and int8 / int4 quantized from the fp32 model by `quantize_model` (per channel; groups of 32).

  perplexity  exp(mean NLL) over the first --tokens tokens of the Python standard library's sources
              (lmlab's embedded `stdlib` corpus, text the model never saw in this form), in windows of
              --context tokens: the prompt path (many rows: dequantize + F.linear)
  steps       the largest relative difference of the logits from fp32 when the same --step-tokens tokens
              are fed one at a time through the KV cache: the decoding path (the C++ kernels)
  greedy      for each prompt, how many of --new-tokens greedy tokens equal fp32's before the first
              difference (and whether all do)

Usage: python benchmarks/quantized_quality.py [--tokens 4096] [--threads 2]
"""

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch

from lmlab.data.stdlib import stdlib_texts
from lmlab.eval.perplexity import perplexity
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.batch import new_cache
from lmlab.models.load import load
from lmlab.models.quantize import quantize_model
from machine import downloaded  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "quantized_quality.json"
MODEL = "smollm2-135m-instruct"
PROMPTS = ["Once upon a time, in a small village at the edge of a great forest,",
           "The three laws of thermodynamics are", "def quicksort(xs):", "Paris is",
           "The most important idea in computer science is"]


def modes(path: Path):
    """(name, how it is made) of every mode measured."""
    return [
        ("fp32", lambda: load(path, "fp32")[0]),
        ("bf16", lambda: load(path, "bf16")[0]),
        ("int8 (GGUF)", lambda: load(path, "int8", activations="fp32")[0]),
        ("int4 (GGUF)", lambda: load(path, "int4", activations="fp32")[0]),
        ("int4 (GGUF, 8-bit activations)", lambda: load(path, "int4")[0]),  # as stored, as llama.cpp runs it
        ("int8 (from fp32)", lambda: quantize_model(load(path, "fp32")[0], "int8")),
        ("int4 (from fp32)", lambda: quantize_model(load(path, "fp32")[0], "int4", 32)),
    ]


@torch.inference_mode()
def step_logits(model, ids: list[int]) -> torch.Tensor:
    """Logits (T, V) of `ids` fed one token at a time through a KV cache."""
    cache = new_cache(model, 1, len(ids))
    return torch.cat([model(torch.tensor([[token]]), kv_cache=cache)[0].float() for token in ids])


def agreement(tokens: list[int], reference: list[int]) -> int:
    """How many leading tokens equal the reference's."""
    return next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b), min(len(tokens), len(reference)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=4096, help="held-out tokens scored for perplexity")
    p.add_argument("--context", type=int, default=1024, help="perplexity window")
    p.add_argument("--step-tokens", type=int, default=64, help="tokens fed one at a time for the 'steps' column")
    p.add_argument("--new-tokens", type=int, default=64, help="greedy tokens per prompt")
    p.add_argument("--threads", type=int)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    path = downloaded(MODEL)
    _, tokenizer = load(path)
    ids = tokenizer.encode("\n".join(stdlib_texts()[:40]))[:args.tokens]
    prompts = [tokenizer.encode(text) for text in PROMPTS]
    config = GenerationConfig(max_new_tokens=args.new_tokens)
    results, reference = {}, {}
    for name, make in modes(path):
        model = make()
        started = time.perf_counter()
        ppl = perplexity(model, torch.tensor(ids), args.context).perplexity
        steps = step_logits(model, ids[:args.step_tokens])
        greedy = [g.token_ids for g in generate_batch(model, prompts, config)]
        if name == "fp32":
            reference = {"perplexity": ppl, "steps": steps, "greedy": greedy}
        agree = [agreement(g, r) for g, r in zip(greedy, reference["greedy"])]
        results[name] = {
            "perplexity": ppl, "perplexity_vs_fp32": ppl / reference["perplexity"] - 1,
            "steps_max_relative_logit_difference": ((steps - reference["steps"]).abs().max()
                                                    / reference["steps"].abs().max()).item(),
            "greedy_tokens_agreeing": agree, "greedy_prompts_identical": sum(a == args.new_tokens for a in agree),
            "seconds": time.perf_counter() - started}
        print(f"{name:<18} perplexity {ppl:8.4f} ({results[name]['perplexity_vs_fp32']:+.4%})  steps "
              f"{results[name]['steps_max_relative_logit_difference']:.1e}  greedy agreeing {agree}", flush=True)
        assert math.isfinite(ppl)
    settings = {"model": MODEL, "gguf": path.name, "tokens": len(ids), "context": args.context,
                "step_tokens": args.step_tokens, "new_tokens": args.new_tokens, "prompts": PROMPTS,
                "threads": torch.get_num_threads(), "torch": torch.__version__, "load_average_1min": os.getloadavg()[0]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"settings": settings, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

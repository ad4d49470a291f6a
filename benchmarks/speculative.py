"""Speculative decoding on SmolLM2-135M-Instruct: tokens/s and acceptance, plain against speculative.

Greedy replies (--new-tokens each, stopping at end of turn) to the chat-templated prompts of two kinds of task,
written for lmlab: input-grounded (summarise, or answer from, a short invented passage: a reply that can quote
its prompt) and free chat (a poem, an explanation, a list: nothing to quote). Each is decoded by

  fp32 plain / int4 plain          one token per pass (int4: the fused C++ step, on activations rounded to int8
                                   as llama.cpp rounds them, lmlab's default for the GGUF file: integer
                                   products, which check several tokens cheaply)
  fp32 lookup / int4 lookup        `--speculate lookup`: drafts by prompt lookup, checked in one pass
  int4a32 plain / int4a32 lookup   the same on int4 with fp32 activations (`--activations fp32`)
  fp32 draft int4                  `--speculate`: SmolLM2 in int4 drafts for itself in fp32 (one tokenizer)

in interleaved rounds (`machine.alternating`); each side's tokens/s is the median over rounds of all tokens
over all seconds of its prompts of a kind, its speed-up the median over rounds of its ratio to plain decoding's
of the same round (which a shared machine's changing load moves less), and its acceptance is drafted tokens
kept / drafted. Every speculative reply is checked against its plain reply (greedy: the same tokens). Prints a
table and writes benchmarks/results/speculative.json. Usage:

  python benchmarks/speculative.py                  # 3 rounds, 96 new tokens, 1 thread (a few minutes)
  python benchmarks/speculative.py --rounds 1 --new-tokens 32     # a smoke test
  python benchmarks/speculative.py --sides "int4 plain,int4 lookup"  # some sides only
  python benchmarks/speculative.py --draft-tokens 3     # at most 3 drafts a round (default 5)
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

import lmlab
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.generation.speculative import Acceptance
from lmlab.tokenizers.chat import chat_prompt
from machine import alternating, device_name, downloaded

PASSAGE = ("The Lindqvist Bridge, finished in 1911, crosses the river Aare at the town of Moorfeld. It is 212 "
           "metres long and rests on seven stone piers. Its engineer, Hedda Lindqvist, was the first woman admitted "
           "to the Moorfeld guild of builders. The bridge was closed for repairs in 1954 after a flood damaged two "
           "piers, and reopened in 1956 with a wider footpath. Today it carries a tram line and is lit at night by "
           "40 lamps.")
TASKS = {
    "grounded": [PASSAGE + "\n\nSummarise the text above in three sentences.",
                 PASSAGE + "\n\nAccording to the text, who was Hedda Lindqvist, and what happened to the bridge in "
                           "1954? Answer in full sentences.",
                 PASSAGE + "\n\nList every number in the text and what it counts."],
    "chat": ["Write a short poem about autumn leaves.",
             "Explain in a few sentences why the sky is blue.",
             "Give me five tips for learning to cook."],
}
SIDES = ["fp32 plain", "fp32 lookup", "fp32 draft int4", "int4 plain", "int4 lookup", "int4a32 plain",
         "int4a32 lookup"]
DRAFT_TOKENS = 5  # lmlab generate's default
RESULTS = Path(__file__).parent / "results" / "speculative.json"


def run_side(side: str, models: dict, tokenizer, prompts: list[list[int]], new_tokens: int, draft_tokens: int):
    """(replies, seconds, acceptance) of one side over `prompts`."""
    dtype, how = side.split(" ", 1)
    draft = models["int4"] if how == "draft int4" else None
    config = GenerationConfig(max_new_tokens=new_tokens, eos_id=tokenizer.stop_ids,
                              draft_tokens=0 if how == "plain" else draft_tokens)
    acceptance, replies = Acceptance(), []
    start = time.perf_counter()
    for prompt in prompts:
        replies.append(generate_batch(models[dtype], [prompt], config, acceptance=acceptance,
                                      draft_model=draft)[0].token_ids)
    return replies, time.perf_counter() - start, acceptance


def measure(rounds: int, new_tokens: int, sides: list[str], draft_tokens: int) -> dict:
    """Every side on every kind of task, interleaved; medians of tokens/s and of its ratio to plain decoding's in
    each round, acceptance, and whether each side's replies equal plain decoding's of the same dtype."""
    path = downloaded("smollm2-135m-instruct")
    dtypes = {side.split()[0] for side in sides} | {"int4" for side in sides if "draft int4" in side}
    models = {dtype: lmlab.load(path, dtype.removesuffix("a32"),
                                activations="fp32" if dtype.endswith("a32") else None)[0] for dtype in dtypes}
    tokenizer = lmlab.load(path, "int4")[1]
    results = {}
    for kind, texts in TASKS.items():
        prompts = [tokenizer.encode(chat_prompt(tokenizer, [{"role": "user", "content": text}])) for text in texts]
        speeds, accepted, replies = {s: [] for s in sides}, {}, {}
        for _, side in alternating(sides, rounds):
            out, seconds, acceptance = run_side(side, models, tokenizer, prompts, new_tokens, draft_tokens)
            speeds[side].append(sum(map(len, out)) / seconds)
            accepted[side], replies[side] = acceptance, out
            print(f"  {kind:8} {side:16} {speeds[side][-1]:6.1f} tok/s", flush=True)
        results[kind] = {side: {"tokens_per_s": round(statistics.median(speeds[side]), 1),
                                "acceptance": round(accepted[side].rate, 3) if accepted[side].drafted else None,
                                "tokens_per_pass": round(accepted[side].tokens / (accepted[side].passes + len(prompts)), 2)
                                if accepted[side].drafted else 1.0,
                                "x_plain": _paired_ratio(speeds, side),
                                "same_as_plain": _same(replies, side)}
                         for side in sides}
    return results


def _paired_ratio(speeds: dict, side: str) -> float | None:
    """The median over rounds of `side`'s tokens/s over its dtype's plain tokens/s in the same round (run next
    to it, so a shift of the machine's load between rounds cancels); None without plain decoding."""
    plain = side.split()[0] + " plain"
    if plain not in speeds:
        return None
    return round(statistics.median(a / b for a, b in zip(speeds[side], speeds[plain])), 2)


def _same(replies: dict, side: str) -> bool | None:
    """Whether `side`'s replies are its dtype's plain replies; None when plain decoding was not measured."""
    plain = side.split()[0] + " plain"
    return replies[side] == replies[plain] if plain in replies else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--draft-tokens", type=int, default=DRAFT_TOKENS)
    parser.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, of: {', '.join(SIDES)}")
    args = parser.parse_args()
    sides = args.sides.split(",")
    if not set(sides) <= set(SIDES):
        parser.error(f"--sides: each of {', '.join(SIDES)}")
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    results = measure(args.rounds, args.new_tokens, sides, args.draft_tokens)
    report = {"cpu": device_name(torch.device("cpu")), "threads": args.threads, "rounds": args.rounds,
              "new_tokens": args.new_tokens, "draft_tokens": args.draft_tokens,
              "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)], "results": results}
    print(f"\n{'side':16} " + " ".join(f"{kind + ' tok/s':>15} {'x plain':>7} {'kept':>6} {'tok/pass':>8}"
                                        for kind in TASKS))
    for side in sides:
        cells = []
        for kind in TASKS:
            r = results[kind][side]
            kept = "-" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
            same = "!" if r["same_as_plain"] is False else ""
            ratio = "-" if r["x_plain"] is None else f"{r['x_plain']:.2f}x"
            cells.append(f"{r['tokens_per_s']:>14.1f}{same or ' '} {ratio:>7} {kept:>6} {r['tokens_per_pass']:>8.2f}")
        print(f"{side:16} " + " ".join(cells))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"(! marks replies that differ from plain decoding's; written to {RESULTS})")


if __name__ == "__main__":
    main()

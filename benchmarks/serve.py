"""Serving under load: N concurrent streaming clients against `lmlab serve`, against llama.cpp's
server (llama-cpp-python[server]) and against HF transformers' `generate` in static batches, all on
SmolLM2-135M-Instruct from the zoo's GGUF (`lmlab download smollm2-135m-instruct`).

Both servers run in their own process on 127.0.0.1; the clients (asyncio + httpx, in this process)
each send one greedy chat request at a time, streamed, until the requests (or the time) run out.
Before the load, every distinct question is asked once alone, not streamed: each streamed reply
under load must equal that reply, so a token lost, duplicated or mixed up between requests shows as
a mismatch. Measured: errors, mismatches, aggregate tokens/s (completion tokens of all requests /
wall time of the load), and p50/p99 time to first token and inter-token latency (the gaps between
streamed chunks that carry text).

HF has no server: the same requests run in-process as static batches of N (left-padded, greedy,
stopped at the end-of-turn token), the way a batch job without continuous batching runs them; its
tokens/s counts each row's tokens up to its end of turn, and it streams nothing, so no latencies.
llama.cpp's column is skipped, with a note, when llama-cpp-python's server is not installed.

With --adapters N the question is what serving LoRA adapters costs: lmlab fp32 serving the base alone
against lmlab fp32 serving the base and N random LoRA adapters (rank 8 on every matrix, `--adapter NAME=DIR`),
its requests spread evenly over the base and the adapters, which decode in one batch on the shared weights
(llama.cpp's server applies one adapter to every request, so it has no column; nor HF). Each reply is checked
against the same (model, question) asked alone.

With --speculate lookup|MODEL the question is what speculative decoding gives a server: lmlab serve plain
against lmlab serve --speculate (both started, at --dtype), on two kinds of questions from
benchmarks/speculative.py (answers from a given passage, which prompt lookup can copy, and free chat),
in interleaved rounds (plain, speculative, plain, ...: the median of each side's rounds); the acceptance is
the speculating server's /metrics tokens_accepted / tokens_drafted over its rounds, and every speculative
reply asked alone is checked against the plain server's (greedy: the same text).
Usage:

  python benchmarks/serve.py                     # 16 clients, 64 requests of up to 128 tokens, lmlab int4
  python benchmarks/serve.py --dtype int8        # or fp32, bf16
  python benchmarks/serve.py --quick             # a smoke test, not a benchmark
  python benchmarks/serve.py --clients 8 --duration 60
  python benchmarks/serve.py --adapters 2        # the base alone against the base and 2 adapters, fp32
  python benchmarks/serve.py --speculate lookup --dtype fp32 --clients 4 --requests 8 --rounds 2
"""

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch
import transformers

from lmlab.models.load import load
from lmlab.models.peft_files import base_fingerprint, save_peft
from lmlab.modules.peft import apply_peft, peft_parameters
from lmlab.tokenizers.chat import chat_prompt
from machine import device_name, downloaded  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "serve.json"
MODEL = "smollm2-135m-instruct"
SERVED = "smollm2"  # the model id both servers answer to
QUESTIONS = [
    "What is the capital of France?", "Name three primary colours.", "How many legs does a spider have?",
    "Write a haiku about the sea.", "What is 12 times 12?", "Why is the sky blue?",
    "Give me a synonym for happy.", "What does a compiler do?", "Suggest a name for a cat.",
    "What is photosynthesis?", "Translate 'good morning' into Spanish.", "What is the boiling point of water?",
    "List two uses of a paperclip.", "Who wrote Romeo and Juliet?", "What is a prime number?",
    "Describe a rainbow in one sentence.",
]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=16, help="concurrent streaming clients (and HF's batch size)")
    p.add_argument("--requests", type=int, default=64, help="requests in all (cycling through the questions)")
    p.add_argument("--duration", type=float, help="also stop starting requests after this many seconds")
    p.add_argument("--max-tokens", type=int, default=128, help="max_tokens of each request")
    p.add_argument("--dtype", choices=["fp32", "bf16", "int8", "int4"], default="int4",
                   help="lmlab serve --dtype (int4: the file's own Q4_1 blocks)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of each side (default: every core)")
    p.add_argument("--adapters", type=int, default=0,
                   help="measure lmlab fp32 serving this many LoRA adapters beside the base against the base alone")
    p.add_argument("--speculate", metavar="lookup|MODEL",
                   help="measure lmlab serve --speculate lookup|MODEL against plain lmlab serve, grounded and free chat")
    p.add_argument("--draft-tokens", type=int, default=5, help="with --speculate: lmlab serve --draft-tokens")
    p.add_argument("--rounds", type=int, default=3, help="with --speculate: interleaved rounds of each side")
    p.add_argument("--quick", action="store_true", help="4 clients, 8 requests of 16 tokens: a smoke test")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.quick:
        args.clients, args.requests, args.max_tokens = 4, 8, 16
    if min(args.clients, args.requests, args.max_tokens, args.threads) < 1:
        p.error("--clients, --requests, --max-tokens and --threads must be at least 1")
    return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on a free port of 127.0.0.1, ready once /v1/models answers."""

    def __init__(self, name: str, command: list[str], port: int, threads: int):
        self.name, self.url = name, f"http://127.0.0.1:{port}"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        self.log = tempfile.TemporaryFile()  # a pipe nobody reads would fill up and stall a chatty server
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                self.log.seek(0)
                raise SystemExit(f"{name} did not start: {self.log.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def lmlab_server(path: Path, args, adapters: dict[str, Path] | None = None, flags: tuple[str, ...] = ()) -> Server:
    """`lmlab serve` of the model at `path`, with the LoRA adapters `adapters` (model id -> directory) beside it,
    and more `flags`."""
    port = free_port()
    flags = [*flags, *(f for name, directory in (adapters or {}).items() for f in ("--adapter", f"{name}={directory}"))]
    return Server("lmlab", [sys.executable, "-c", "import sys; from lmlab.cli.main import main; sys.exit(main())",
                            "serve", "--model", str(path), "--name", SERVED, "--port", str(port),
                            "--slots", str(args.clients), "--dtype", args.dtype, *flags], port, args.threads)


def random_adapters(path: Path, n: int, root: Path) -> dict[str, Path]:
    """`n` LoRA adapters of the model at `path` (rank 8 on every matrix, random weights), saved under `root`."""
    adapters = {}
    for i in range(n):
        model, _ = load(path, "fp32")  # LoRA trains on float weights
        settings = {"rank": 8, "alpha": 16.0, "targets": ["qkv", "out", "gate_up", "down"]}
        apply_peft(model, "lora", **settings)
        torch.manual_seed(i)
        with torch.no_grad():
            for p in peft_parameters(model).values():
                p.copy_(torch.randn_like(p) * 0.02)
        adapters[f"adapter{i + 1}"] = save_peft(model, root / f"adapter{i + 1}", "lora", settings,
                                                base_fingerprint(model))
    return adapters


def llama_cpp_server(path: Path, args) -> Server:
    """llama-cpp-python's server, queueing concurrent requests (by default a new one interrupts the last)."""
    port = free_port()
    return Server("llama.cpp", [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias",
                                SERVED, "--port", str(port), "--n_ctx", "2048", "--n_threads", str(args.threads),
                                "--interrupt_requests", "False", "--verbose", "False"],
                  port, args.threads)


def body(question: str, max_tokens: int, stream: bool, model: str = SERVED) -> dict:
    """A greedy chat request for `question` to `model` (streamed ones also ask for their token counts)."""
    request = {"model": model, "messages": [{"role": "user", "content": question}], "temperature": 0,
               "max_tokens": max_tokens, "stream": stream}
    return {**request, "stream_options": {"include_usage": True}} if stream else request


async def references(url: str, max_tokens: int, models: list[str],
                     questions: list[str] = QUESTIONS) -> dict[tuple[str, str], str]:
    """Each (model, question)'s greedy reply, asked alone and not streamed."""
    async with httpx.AsyncClient(timeout=600) as client:
        replies = {}
        for model in models:
            for question in questions:
                r = await client.post(f"{url}/v1/chat/completions", json=body(question, max_tokens, False, model))
                r.raise_for_status()
                replies[model, question] = r.json()["choices"][0]["message"]["content"]
        return replies


async def streamed(client: httpx.AsyncClient, url: str, model: str, question: str, max_tokens: int) -> dict:
    """One streamed request: its text, completion tokens, time to first token and inter-token gaps."""
    start = time.perf_counter()
    pieces, arrivals, tokens = [], [], None
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body(question, max_tokens, True, model)) as r:
        if r.status_code != 200:
            return {"error": f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"}
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if "error" in event:
                return {"error": str(event["error"])}
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            for choice in event.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    pieces.append(text)
                    arrivals.append(time.perf_counter())
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return {"model": model, "question": question, "text": "".join(pieces), "tokens": tokens if tokens is not None else len(pieces),
            "ttft_s": arrivals[0] - start if arrivals else None, "gaps_s": gaps}


async def under_load(url: str, args, models: list[str], questions: list[str] = QUESTIONS) -> tuple[list[dict], float]:
    """All requests from `args.clients` concurrent clients, spread over `models`; (results, wall seconds)."""
    queue = [(models[i % len(models)], questions[i % len(questions)]) for i in range(args.requests)]
    results = []
    start = time.perf_counter()

    async def client_loop(client: httpx.AsyncClient):
        while queue and (args.duration is None or time.perf_counter() - start < args.duration):
            model, question = queue.pop()
            try:
                results.append(await streamed(client, url, model, question, args.max_tokens))
            except httpx.HTTPError as e:
                results.append({"error": f"{type(e).__name__}: {e}"})

    limits = httpx.Limits(max_connections=args.clients)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(args.clients)))
    return results, time.perf_counter() - start


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))]


def summary(results: list[dict], wall: float, replies: dict[tuple[str, str], str]) -> dict:
    done = [r for r in results if "error" not in r]
    ttft = [r["ttft_s"] for r in done if r["ttft_s"] is not None]
    gaps = [g for r in done for g in r["gaps_s"]]
    tokens = sum(r["tokens"] for r in done)
    return {"requests": len(results), "errors": len(results) - len(done),
            "first_errors": [r["error"] for r in results if "error" in r][:3],
            "mismatched_replies": sum(r["text"] != replies[r["model"], r["question"]] for r in done),
            "completion_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
            "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
            "itl_p50_s": percentile(gaps, 50), "itl_p99_s": percentile(gaps, 99)}


def run_server(server: Server, args, models: tuple[str, ...] = (SERVED,)) -> dict:
    """The load on the started `server`, its requests spread over `models`; stops the server."""
    try:
        replies = asyncio.run(references(server.url, args.max_tokens, list(models)))
        asyncio.run(under_load(server.url, args, list(models)))  # warm-up: the first batches allocate and lay out weights
        return summary(*asyncio.run(under_load(server.url, args, list(models))), replies)
    finally:
        server.stop()


def adapter_costs(path: Path, args) -> None:
    """--adapters N: lmlab fp32 serving the base alone against the base and N adapters; prints and saves."""
    args.dtype = "fp32"
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        adapters = random_adapters(path, args.adapters, Path(tmp))
        results = {"base alone": run_server(lmlab_server(path, args), args),
                   f"base + {args.adapters} adapters": run_server(lmlab_server(path, args, adapters), args,
                                                                  (SERVED, *adapters))}
    print(f"SmolLM2-135M-Instruct fp32 in lmlab serve, {device_name(torch.device('cpu'))}, {args.threads} threads; "
          f"{args.clients} clients, {args.requests} greedy chat requests of up to {args.max_tokens} tokens; load "
          f"average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    for name, r in results.items():
        print(f"{name:<22} {r['tokens_per_s']:>8.1f} tokens/s, errors {r['errors']}, replies != alone "
              f"{r['mismatched_replies']}, TTFT p50 {r['ttft_p50_s'] * 1000:.0f} ms, ITL p50 "
              f"{r['itl_p50_s'] * 1000:.1f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = args.out.with_name(args.out.stem + "_adapters.json")
    out.write_text(json.dumps({"cpu": device_name(torch.device("cpu")), "threads": args.threads,
                               "load_average_1min": [load_before, os.getloadavg()[0]], "adapters": args.adapters,
                               "clients": args.clients, "requests": args.requests, "max_tokens": args.max_tokens,
                               "results": results}, indent=2))
    print(f"wrote {out}")


def drafted_accepted(url: str) -> tuple[float, float]:
    """The server's /metrics tokens_drafted and tokens_accepted so far."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return tuple(float(re.search(rf"^lmlab_engine_tokens_{name} (\S+)$", text, re.M).group(1))
                 for name in ("drafted", "accepted"))


def speculation_round(servers: dict[str, Server], args, questions: list[str]) -> dict:
    """Each side's summaries over `args.rounds` interleaved rounds on `questions`, the medians, and acceptance."""
    replies = {side: asyncio.run(references(s.url, args.max_tokens, [SERVED], questions)) for side, s in servers.items()}
    runs = {side: [] for side in servers}
    for server in servers.values():  # warm-up
        asyncio.run(under_load(server.url, args, [SERVED], questions))
    before = drafted_accepted(servers["speculative"].url)
    for _ in range(args.rounds):
        for side, server in servers.items():
            runs[side].append(summary(*asyncio.run(under_load(server.url, args, [SERVED], questions)), replies[side]))
    drafted, accepted = (after - b for after, b in zip(drafted_accepted(servers["speculative"].url), before))
    return {"replies != plain": sum(replies["speculative"][key] != reply for key, reply in replies["plain"].items()),
            "acceptance": accepted / drafted if drafted else 0.0, "drafted": drafted, "accepted": accepted,
            **{side: {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
                      "itl_p50_s": statistics.median(r["itl_p50_s"] for r in rs if r["itl_p50_s"] is not None),
                      "errors": sum(r["errors"] for r in rs), "mismatched_replies": sum(r["mismatched_replies"] for r in rs),
                      "rounds": rs} for side, rs in runs.items()}}


def speculation_costs(path: Path, args) -> None:
    """--speculate: lmlab serve plain against lmlab serve --speculate, grounded and free chat; prints and saves."""
    from speculative import TASKS  # benchmarks/speculative.py's questions, written for lmlab

    load_before = os.getloadavg()[0]
    servers = {"plain": lmlab_server(path, args)}
    try:
        servers["speculative"] = lmlab_server(path, args, flags=("--speculate", args.speculate, "--draft-tokens",
                                                                 str(args.draft_tokens)))
        results = {kind: speculation_round(servers, args, questions) for kind, questions in TASKS.items()}
    finally:
        for server in servers.values():
            server.stop()
    print(f"SmolLM2-135M-Instruct {args.dtype} in lmlab serve, {device_name(torch.device('cpu'))}, {args.threads} "
          f"threads; {args.clients} clients, {args.requests} greedy chat requests of up to {args.max_tokens} tokens, "
          f"--speculate {args.speculate} --draft-tokens {args.draft_tokens}, median of {args.rounds} interleaved "
          f"rounds; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    for kind, r in results.items():
        plain, spec = r["plain"]["tokens_per_s"], r["speculative"]["tokens_per_s"]
        print(f"{kind:<9} plain {plain:7.1f} tokens/s, speculative {spec:7.1f} tokens/s ({spec / plain:.2f}x), "
              f"acceptance {r['acceptance']:.0%}, ITL p50 {r['plain']['itl_p50_s'] * 1000:.1f} -> "
              f"{r['speculative']['itl_p50_s'] * 1000:.1f} ms, replies != plain {r['replies != plain']}, errors "
              f"{r['plain']['errors'] + r['speculative']['errors']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = args.out.with_name(args.out.stem + "_speculative.json")
    out.write_text(json.dumps({"cpu": device_name(torch.device("cpu")), "threads": args.threads, "dtype": args.dtype,
                               "load_average_1min": [load_before, os.getloadavg()[0]], "speculate": args.speculate,
                               "draft_tokens": args.draft_tokens, "clients": args.clients, "requests": args.requests,
                               "max_tokens": args.max_tokens, "rounds": args.rounds, "results": results}, indent=2))
    print(f"wrote {out}")


@torch.inference_mode()
def hf_static_batches(path: Path, args) -> dict:
    """The same requests through HF `generate` in static batches of `args.clients`."""
    torch.set_num_threads(args.threads)
    _, tokenizer = load(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                              dtype=torch.float32).eval()
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.requests)]
    prompts = [tokenizer.encode(chat_prompt(tokenizer, [{"role": "user", "content": q}])) for q in questions]
    stop_ids, pad = list(tokenizer.stop_ids), tokenizer.pad_id or 0

    def batch(rows: list[list[int]]) -> int:
        T = max(len(p) for p in rows)
        ids = torch.tensor([[pad] * (T - len(p)) + p for p in rows])  # (B, T), left-padded
        mask = torch.tensor([[0] * (T - len(p)) + [1] * len(p) for p in rows])
        out = model.generate(ids, attention_mask=mask, max_new_tokens=args.max_tokens, do_sample=False,
                             eos_token_id=stop_ids, pad_token_id=pad)[:, T:].tolist()
        return sum(next((i for i, t in enumerate(row) if t in stop_ids), len(row)) for row in out)

    batch(prompts[:args.clients])  # warm-up
    start = time.perf_counter()
    tokens = sum(batch(prompts[i:i + args.clients]) for i in range(0, len(prompts), args.clients))
    wall = time.perf_counter() - start
    return {"requests": len(prompts), "errors": 0, "completion_tokens": tokens, "wall_s": wall,
            "tokens_per_s": tokens / wall}


def main() -> None:
    args = parse_args()
    transformers.logging.set_verbosity_error()
    path = downloaded(MODEL)
    if args.adapters:
        adapter_costs(path, args)
        return
    if args.speculate:
        speculation_costs(path, args)
        return
    load_before = os.getloadavg()[0]
    results = {"lmlab": run_server(lmlab_server(path, args), args)}
    llama_cpp = importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("sse_starlette")
    if llama_cpp:
        results["llama.cpp"] = run_server(llama_cpp_server(path, args), args)
    results["hf"] = hf_static_batches(path, args)

    print(f"SmolLM2-135M-Instruct ({path.name}; lmlab --dtype {args.dtype}, llama.cpp on the Q4_1 weights, HF "
          f"fp32), {device_name(torch.device('cpu'))}, {args.threads} threads each; {args.clients} clients, "
          f"{args.requests} greedy chat requests of up to {args.max_tokens} tokens")
    columns = list(results)
    print(f"{'':<28}" + "".join(f"{c:>12}" for c in columns))

    def row(label: str, key: str, fmt: str, scale: float = 1) -> None:
        cells = [results[c].get(key) for c in columns]
        print(f"{label:<28}" + "".join(f"{format(v * scale, fmt) if v is not None else 'n/a':>12}" for v in cells))

    row("requests", "requests", ".0f")
    row("errors", "errors", ".0f")
    row("replies != alone", "mismatched_replies", ".0f")
    row("completion tokens", "completion_tokens", ".0f")
    row("aggregate tokens/s", "tokens_per_s", ".1f")
    row("time to first token p50 ms", "ttft_p50_s", ".0f", 1000)
    row("time to first token p99 ms", "ttft_p99_s", ".0f", 1000)
    row("inter-token p50 ms", "itl_p50_s", ".1f", 1000)
    row("inter-token p99 ms", "itl_p99_s", ".1f", 1000)
    ratios = {name: results["lmlab"]["tokens_per_s"] / r["tokens_per_s"] for name, r in results.items()
              if name != "lmlab"}
    print("lmlab's aggregate tokens/s: " + ", ".join(f"{ratio:.2f}x {name}'s" for name, ratio in ratios.items()))
    print("HF: static batches in-process, not streamed (no latencies); replies != alone: streamed replies under load "
          "that differ from the same question asked alone")
    if not llama_cpp:
        print("llama.cpp: llama-cpp-python[server] not installed, column skipped")

    machine = {"device_name": device_name(torch.device("cpu")), "cpu_count": os.cpu_count(), "threads": args.threads,
               "torch": torch.__version__, "transformers": transformers.__version__,
               "python": platform.python_version(), "load_average_1min": [load_before, os.getloadavg()[0]]}
    settings = {"model": MODEL, "gguf": path.name, "lmlab_dtype": args.dtype, "clients": args.clients,
                "requests": args.requests, "duration_s": args.duration, "max_tokens": args.max_tokens,
                "quick": args.quick, "llama_cpp": "measured" if llama_cpp else "not installed, skipped"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "settings": settings, "results": results,
                                    "lmlab_tokens_per_s_ratio": ratios}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

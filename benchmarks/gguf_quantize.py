"""Writing a quantized GGUF file: `lmlab export`'s quantizers against llama.cpp's own (`llama_model_quantize`
through llama-cpp-python, what `llama-quantize` runs), on the same weights.

A random Llama whose every row is a multiple of 256 wide (so every matrix can be Q4_K; default 2 layers,
d_model 1024, d_ff 2816, vocab 8192: 36 M weights) is written once as an f32 GGUF file. Each round then makes
the same quantized file both ways, interleaved: lmlab's `save_gguf(model, ..., dtype)` from the model in memory
(Q8_0 and Q4_0 by gguf-py's numpy quantizers, Q4_K by lmlab's own, `models/gguf_q4_k.py`) and llama.cpp
requantizing the f32 file with `pure` set (every matrix in the one type). Reported per type: the median
seconds of the rounds, weights quantized a second, and the file sizes. lmlab's quantizers run in numpy on one
core; llama.cpp's in C on --threads.

Usage: python benchmarks/gguf_quantize.py [--types q8_0 q4_k] [--rounds 3] [--threads 2] [--layers 2]
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from lmlab.models.decoder import build_decoder
from lmlab.models.gguf_export import save_gguf
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer
from machine import alternating, device_name  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "gguf_quantize.json"
LLAMA_FTYPES = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
                "q4_k": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--types", nargs="+", choices=list(LLAMA_FTYPES), default=["q8_0", "q4_k"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="llama.cpp's quantizing threads")
    p.add_argument("--layers", type=int, default=2)
    return p.parse_args()


def model_and_tokenizer(layers: int):
    """The random Llama (rows multiples of 256) and a small BPE tokenizer padded to its vocabulary."""
    torch.manual_seed(0)
    cfg = preset("llama-tiny", vocab_size=8192, context_length=256, n_layers=layers, n_heads=8, n_kv_heads=8,
                 d_model=1024, d_ff=2816, tie_embeddings=False)
    backend = train_bpe(["the quick brown fox jumps over the lazy dog"] * 50, vocab_size=300)
    return build_decoder(cfg).eval(), TextTokenizer(backend, None, None, None, (), None)


def llama_cpp_quantize(llama_cpp, source: Path, out: Path, qtype: str, threads: int) -> None:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.pure, params.nthread = getattr(llama_cpp, LLAMA_FTYPES[qtype]), True, threads
    if llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params) != 0:
        raise SystemExit(f"llama.cpp could not quantize {source} as {qtype}")


def main() -> None:
    args = parse_args()
    import llama_cpp  # its quantizer logs every tensor on stderr

    model, tokenizer = model_and_tokenizer(args.layers)
    weights = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2)
    times: dict[tuple[str, str], list[float]] = {}
    sizes: dict[tuple[str, str], int] = {}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        source = save_gguf(model, tokenizer, Path(tmp) / "f32.gguf", "f32")
        sides = [(side, qtype) for qtype in args.types for side in ("lmlab", "llama.cpp")]
        for _, (side, qtype) in alternating(sides, args.rounds):
            out = Path(tmp) / f"{side}-{qtype}.gguf"
            start = time.perf_counter()
            if side == "lmlab":
                save_gguf(model, tokenizer, out, qtype)
            else:
                llama_cpp_quantize(llama_cpp, source, out, qtype, args.threads)
            times.setdefault((side, qtype), []).append(time.perf_counter() - start)
            sizes[side, qtype] = out.stat().st_size
    rows = [{"type": qtype, "side": side, "seconds": statistics.median(t), "weights_per_s": weights / statistics.median(t),
             "mib": sizes[side, qtype] / 2**20, "rounds": t} for (side, qtype), t in times.items()]
    print(f"{device_name(torch.device('cpu'))}; {weights / 1e6:.1f} M weights; llama.cpp on {args.threads} threads, "
          f"lmlab on one; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"{'type':<6} {'side':<10} {'median s':>9} {'M weights/s':>12} {'MiB':>8}")
    for row in rows:
        print(f"{row['type']:<6} {row['side']:<10} {row['seconds']:>9.2f} {row['weights_per_s'] / 1e6:>12.1f} "
              f"{row['mib']:>8.1f}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"cpu": device_name(torch.device("cpu")), "weights": weights,
                                   "threads": args.threads, "load": [load_before, os.getloadavg()[0]],
                                   "rows": rows}, indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()

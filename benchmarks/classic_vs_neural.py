"""Classic versus neural language models on the same text, the same tokens, the same held-out blocks.

Every model is trained through `lmlab train` (one row of ROWS: a name and its argv) with one
shared BPE tokenizer, then loaded with `lmlab.load` and scored the same way: the mean next-token
cross-entropy over every validation block of `split_blocks(tokens, BLOCK, val_fraction, seed)` —
the blocks the neural recipes hold out — each block read from a fresh state (`mean_block_loss`).
Rows whose --arch this lmlab does not have (say, the n-gram models before they are merged) are
skipped with a note. Prints validation perplexity, parameters and training time side by side and
writes results/classic_vs_neural.json and a PNG of perplexity against training time.

With --held-out NAME the models are scored instead on another corpus, cut into blocks the same way:
whole documents no model trained on (`--data kjv --held-out kjv-held-out`: the King James Bible's
Esther and Matthew, real English).

  python benchmarks/classic_vs_neural.py             # markov corpus, a few minutes on one thread
  python benchmarks/classic_vs_neural.py --quick     # a smoke test
  python benchmarks/classic_vs_neural.py --data stdlib --steps 2000
  python benchmarks/classic_vs_neural.py --data kjv --held-out kjv-held-out --vocab-size 4096 --steps 4000
"""

import argparse
import json
import math
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from lmlab.cli.main import main
from lmlab.cli.train import ARCHS
from lmlab.config import TrainConfig
from lmlab.data.blocks import split_blocks
from lmlab.data.corpora import load_corpus
from lmlab.data.tokens import tokenize_corpus
from lmlab.eval.perplexity import mean_block_loss
from lmlab.eval.plot import save_line_plot
from lmlab.models.load import load
from lmlab.tokenizers.bpe import save_tokenizer, train_bpe

from machine import device_name  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "classic_vs_neural.json"
BLOCK, BATCH, SEED = 64, 16, 0
VAL_FRACTION = TrainConfig.val_fraction


def rows(steps: int) -> list[tuple[str, list[str]]]:
    """(name, argv of `lmlab train` without --data/--out/--tokenizer) for every compared model."""
    neural = ["--max-steps", str(steps), "--batch-size", str(BATCH), "--block-size", str(BLOCK), "--seed", str(SEED),
              "--eval-every", str(steps), "--checkpoint-every", str(steps), "--warmup-steps", str(steps // 10)]
    split = ["--block-size", str(BLOCK), "--seed", str(SEED)]  # the n-grams count the same training blocks
    return [
        ("3-gram KN", ["--arch", "ngram", "--order", "3", "--smoothing", "kn", *split]),
        ("5-gram KN", ["--arch", "ngram", "--order", "5", "--smoothing", "kn", *split]),
        ("window LM (n=5)", ["--arch", "window", "--window", "5", "--d-model", "64", "--hidden", "256",
                             "--lr", "3e-3", *neural]),
        ("LSTM (2x256)", ["--arch", "lstm", "--n-layers", "2", "--d-model", "256", "--hidden", "256",
                          "--tie-embeddings", "--lr", "3e-3", *neural]),
        ("GRU (2x256)", ["--arch", "gru", "--n-layers", "2", "--d-model", "256", "--hidden", "256",
                         "--tie-embeddings", "--lr", "3e-3", *neural]),
        ("transformer (gpt2-tiny, 2 layers)", ["--arch", "transformer", "--model", "gpt2-tiny", "--n-layers", "2",
                                               "--context-length", str(BLOCK), "--lr", "3e-3", *neural]),
    ]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="markov", help="corpus: a path or an embedded name (default markov)")
    p.add_argument("--held-out", help="score on this corpus (whole documents no model saw) instead of --data's "
                                      "validation blocks")
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--steps", type=int, default=300, help="training steps of each neural model")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1: on a shared 2-core machine, 2 threads made the "
                        "window LM 20x slower, waiting for each other)")
    p.add_argument("--quick", action="store_true", help="few steps, small vocabulary: a smoke test, not a benchmark")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.quick:
        args.steps, args.vocab_size = 10, 300
    return args


def n_parameters(model) -> int | None:
    """Distinct trainable numbers (tied matrices once); None for a model without torch parameters."""
    params = {id(p): p.numel() for p in model.parameters()} if isinstance(model, torch.nn.Module) else {}
    return sum(params.values()) or None


def main_benchmark() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    texts = load_corpus(args.data)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        tokenizer = train_bpe(texts, args.vocab_size)
        save_tokenizer(tokenizer, work)
        tokens = tokenize_corpus(texts, tokenizer)
        val_blocks = split_blocks(tokens, BLOCK, VAL_FRACTION, SEED).val_blocks
        if args.held_out:  # every whole block of the held-out documents' tokens
            tokens = tokenize_corpus(load_corpus(args.held_out), tokenizer)
            val_blocks = np.arange((len(tokens) - 1) // BLOCK, dtype=np.int64) * BLOCK
        results = []
        for name, argv in rows(args.steps):
            arch = argv[argv.index("--arch") + 1]
            if arch not in ARCHS:
                print(f"skipped {name}: this lmlab has no `lmlab train --arch {arch}`")
                continue
            out = work / name.split()[0]
            t0 = time.perf_counter()
            code = main(["train", *argv, "--data", args.data, "--out", str(out), "--tokenizer", str(work)])
            seconds = time.perf_counter() - t0
            if code != 0:
                raise SystemExit(f"training {name} failed (exit code {code})")
            model, _ = load(out)
            loss = mean_block_loss(model.eval(), tokens, val_blocks, BLOCK, BATCH, "cpu")
            results.append({"name": name, "argv": argv, "val_loss": loss, "val_ppl": math.exp(loss),
                            "parameters": n_parameters(model), "train_seconds": seconds})
    print_table(results, len(val_blocks) * BLOCK)
    report = {"machine": {"cpu": device_name(torch.device("cpu")), "threads": args.threads,
                          "python": platform.python_version(), "torch": torch.__version__},
              "data": args.data, "held_out": args.held_out, "vocab_size": tokenizer.get_vocab_size(), "block_size": BLOCK,
              "val_tokens_scored": len(val_blocks) * BLOCK, "steps": args.steps, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    save_line_plot(args.out.with_suffix(".png"), {r["name"]: ([r["train_seconds"]], [r["val_ppl"]]) for r in results},
                   title="Validation perplexity vs training time", xlabel="training time (s)",
                   ylabel="validation perplexity", log_y=True)
    print(f"written: {args.out} and {args.out.with_suffix('.png')}")


def print_table(results: list[dict], scored: int) -> None:
    print(f"\nvalidation perplexity over the same {scored} held-out tokens")
    print(f"{'model':<36} {'val ppl':>9} {'parameters':>11} {'train s':>8}")
    for r in results:
        params = f"{r['parameters']:,}" if r["parameters"] else "-"
        print(f"{r['name']:<36} {r['val_ppl']:>9.2f} {params:>11} {r['train_seconds']:>8.1f}")


if __name__ == "__main__":
    main_benchmark()

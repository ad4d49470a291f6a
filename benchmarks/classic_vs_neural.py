"""Classic versus neural language models on the same text, the same tokens, the same held-out documents.

Runs `lmlab experiment classic-vs-neural` (`lmlab.experiments.classic_vs_neural`: Kneser-Ney 3/4/5-gram and
modified KN on growing shares of the training text; a window LM, an LSTM, a GRU and a small transformer,
each scored at every checkpoint; one BPE tokenizer; every model scored on the same held-out stream in its own
context) in a temporary directory, prints its table, and writes results/classic_vs_neural.json (with the
machine) and the PNG of held-out perplexity against training tokens.

  python benchmarks/classic_vs_neural.py --quick     # a smoke test
  python benchmarks/classic_vs_neural.py             # kjv, held-out Esther and Matthew, 12,000 steps each
  python benchmarks/classic_vs_neural.py --data markov --held-out none --max-steps 2000
"""

import argparse
import json
import platform
import shutil
import tempfile
from pathlib import Path

import torch

from lmlab.experiments.classic_vs_neural import RESULTS, ClassicVsNeuralSettings, compare_classic_neural, results_table
from machine import device_name  # benchmarks/machine.py

OUT = Path(__file__).parent / "results" / f"{RESULTS}.json"


def parse_args() -> argparse.Namespace:
    d = ClassicVsNeuralSettings()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=d.data, help=f"corpus: a path or an embedded name (default {d.data})")
    p.add_argument("--held-out", default=d.held_out, help="the scored corpus, or 'none' for --data's validation "
                                                          f"blocks (default {d.held_out})")
    p.add_argument("--vocab-size", type=int, default=d.vocab_size)
    p.add_argument("--max-steps", type=int, default=d.max_steps, help="training steps of each neural model")
    p.add_argument("--points", type=int, default=d.points, help="points on each curve")
    p.add_argument("--dropout", type=float, default=d.dropout, help="dropout of every neural model")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1: on a shared 2-core machine, 2 threads made the "
                        "window LM 20x slower, waiting for each other)")
    p.add_argument("--quick", action="store_true", help="markov, few steps, small vocabulary: a smoke test")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    if args.quick:
        args.data, args.held_out, args.max_steps, args.points, args.vocab_size = "markov", "none", 20, 2, 300
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    settings = ClassicVsNeuralSettings(data=args.data, held_out=None if args.held_out == "none" else args.held_out,
                                       vocab_size=args.vocab_size, max_steps=args.max_steps, points=args.points,
                                       dropout=args.dropout)
    with tempfile.TemporaryDirectory() as work:
        report = compare_classic_neural(work, settings)
        if report is None:
            raise SystemExit("stopped")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(work) / f"{RESULTS}.png", args.out.with_suffix(".png"))
    report["machine"] = {"cpu": device_name(torch.device("cpu")), "threads": args.threads,
                         "python": platform.python_version(), "torch": torch.__version__}
    args.out.write_text(json.dumps(report, indent=2))
    print(results_table(report), end="")
    print(f"written: {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()

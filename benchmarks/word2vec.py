"""word2vec: lmlab versus gensim on the same generated corpus with the same settings.

Both train on the same tokenized sentences of the generated `analogies` corpus (whose analogy
questions hold by construction), with the same dim, window, negatives, min count, subsampling
threshold, epochs and starting learning rate, for skip-gram and CBOW. For each we time the whole
training call (vocabulary + training, from the same list of sentences) and score the vectors
with the same analogy evaluator (lmlab's 3CosAdd, question words excluded); gensim's own
`evaluate_word_analogies` is reported beside it as a check of that evaluator.

words/s = corpus words x epochs / wall seconds. gensim runs its compiled C loop on `--threads`
worker threads; lmlab runs PyTorch on `--threads` intra-op threads. Rounds alternate which side
goes first; speed is the median over rounds and accuracy the mean (both depend on the seed).

  python benchmarks/word2vec.py              # 60000 sentences, 3 rounds
  python benchmarks/word2vec.py --quick      # a smoke test
"""

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import gensim
import torch
from gensim.models import Word2Vec

from lmlab.data.analogies import analogy_corpus, analogy_questions, format_questions
from lmlab.data.words import UNK, WordVocab, corpus_sentences
from lmlab.eval.analogy import analogy_accuracy
from lmlab.models.word2vec.config import Word2VecConfig
from lmlab.models.word2vec.vectors import WordVectors
from lmlab.recipes.word2vec import train_word2vec
from machine import alternating, device_name  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "word2vec.json"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=60000, help="generated sentences (about 7 words each)")
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negatives", type=int, default=5)
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--sample", type=float, default=1e-3)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="gensim workers and torch threads")
    p.add_argument("--quick", action="store_true", help="a small corpus, one round: a smoke test, not a benchmark")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.quick:
        args.sentences, args.rounds, args.epochs = 5000, 1, 2
    return args


def run_lmlab(sentences, cfg: Word2VecConfig) -> tuple[WordVectors, float]:
    start = time.perf_counter()
    vectors = train_word2vec(sentences, cfg, show_progress=False).vectors
    return vectors, time.perf_counter() - start


def run_gensim(sentences, cfg: Word2VecConfig, threads: int) -> tuple[Word2Vec, float]:
    start = time.perf_counter()
    model = Word2Vec(sentences, vector_size=cfg.dim, window=cfg.window, negative=cfg.negatives, hs=0,
                     min_count=cfg.min_count, sample=cfg.subsample, epochs=cfg.epochs, alpha=cfg.start_lr,
                     sg=int(cfg.method == "sgns"), cbow_mean=1, workers=threads, seed=cfg.seed)
    return model, time.perf_counter() - start


def gensim_vectors(model: Word2Vec) -> WordVectors:
    """gensim's vectors in lmlab's form (a zero <unk> row first), for the same evaluator."""
    words = (UNK, *model.wv.index_to_key)
    counts = (0, *(model.wv.get_vecattr(w, "count") for w in model.wv.index_to_key))
    matrix = torch.cat([torch.zeros(1, model.wv.vector_size), torch.from_numpy(model.wv.vectors.copy())])
    return WordVectors(WordVocab(words, counts), matrix)


def gensim_own_accuracy(model: Word2Vec, questions_file: Path) -> float:
    return model.wv.evaluate_word_analogies(str(questions_file), case_insensitive=True)[0]


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    sentences = corpus_sentences(analogy_corpus(args.sentences, seed=0))
    n_words = sum(map(len, sentences))
    questions = analogy_questions()
    questions_file = Path(tempfile.mkdtemp()) / "questions.txt"
    questions_file.write_text(format_questions(questions))
    load_before = os.getloadavg()[0]

    results = []
    for method in ("sgns", "cbow"):
        times = {"lmlab": [], "gensim": []}
        accuracy = {"lmlab": [], "gensim": [], "gensim (own evaluator)": []}
        for r, side in alternating(("lmlab", "gensim"), args.rounds):
            cfg = Word2VecConfig(method=method, dim=args.dim, window=args.window, negatives=args.negatives,
                                 min_count=args.min_count, subsample=args.sample, epochs=args.epochs, seed=r)
            if side == "lmlab":
                vectors, seconds = run_lmlab(sentences, cfg)
            else:
                model, seconds = run_gensim(sentences, cfg, args.threads)
                vectors = gensim_vectors(model)
                accuracy["gensim (own evaluator)"].append(gensim_own_accuracy(model, questions_file))
            times[side].append(seconds)
            accuracy[side].append(analogy_accuracy(vectors, questions).total.accuracy)
        for impl in ("lmlab", "gensim"):
            seconds = statistics.median(times[impl])
            results.append({"method": method, "impl": impl, "seconds": seconds,
                            "words_per_s": n_words * args.epochs / seconds,
                            "analogy_accuracy": statistics.mean(accuracy[impl]),
                            "analogy_accuracy_rounds": accuracy[impl]})
        results[-1]["gensim_own_evaluator_accuracy"] = statistics.mean(accuracy["gensim (own evaluator)"])

    print(f"{device_name(torch.device('cpu'))}, {args.threads} thread(s), torch {torch.__version__}, "
          f"gensim {gensim.__version__}; {args.sentences} sentences ({n_words} words), dim {args.dim}, "
          f"window {args.window}, negatives {args.negatives}, min_count {args.min_count}, sample {args.sample}, "
          f"{args.epochs} epochs, {args.rounds} rounds; {len(questions)} analogy questions")
    print(f"{'method':<7}{'impl':<8}{'words/s':>11}{'seconds':>9}{'analogy acc':>13}{'lmlab/gensim':>14}")
    for row in results:
        gensim_row = next(x for x in results if x["method"] == row["method"] and x["impl"] == "gensim")
        print(f"{row['method']:<7}{row['impl']:<8}{row['words_per_s']:>11,.0f}{row['seconds']:>9.2f}"
              f"{row['analogy_accuracy']:>12.1%}{row['words_per_s'] / gensim_row['words_per_s']:>13.2f}x")
    for row in results:
        if "gensim_own_evaluator_accuracy" in row:
            print(f"gensim {row['method']}: its own evaluate_word_analogies gives "
                  f"{row['gensim_own_evaluator_accuracy']:.1%}")

    machine = {"device_name": device_name(torch.device("cpu")), "cpu_count": os.cpu_count(),
               "threads": args.threads, "torch": torch.__version__, "gensim": gensim.__version__,
               "python": platform.python_version(), "load_average_1min": [load_before, os.getloadavg()[0]]}
    settings = {k: v for k, v in vars(args).items() if k != "out"} | {"corpus_words": n_words}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""N-gram models: lmlab's build time (3-gram and 5-gram Kneser-Ney), and lmlab's scoring speed (its C++
scorer, one hash probe per order and token; the first call builds the hash index) against kenlm querying
the SAME ARPA file that lmlab wrote (kenlm's Python module only queries; its estimator
lmplz is a separate binary, so build times have no kenlm column).

Tokens: the standard library's source files (`stdlib`, embedded), tokenized with a byte-level BPE of
8192 ids trained on them. Documents are split 95/5 into training and held-out ones; the training
documents, shuffled anew for every copy, are repeated until there are --tokens tokens (the real
corpus is smaller than 10M tokens, so repeated documents inflate counts but not the vocabulary of
n-grams much). Held-out tokens are scored in rows of --row tokens, each row from its own start (no
<s>; kenlm's `score(row, bos=False, eos=False)`), and both sides' sums are compared. Scoring is timed in
--rounds rounds, lmlab and kenlm interleaved within each, and the medians are reported.

  python benchmarks/ngram.py            # 10M tokens, orders 3 and 5
  python benchmarks/ngram.py --quick    # 300k tokens, a smoke test
"""

import argparse
import json
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from lmlab.data.corpora import load_corpus
from lmlab.models.ngram import fit_ngram, stream_runs
from lmlab.models.ngram.arpa import write_arpa
from lmlab.models.ngram.scoring import SCORER
from lmlab.modules.kernels.build import compiled
from lmlab.tokenizers.bpe import train_bpe

RESULTS = Path(__file__).parent / "results" / "ngram.json"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=10_000_000, help="training tokens (default 10M)")
    p.add_argument("--orders", type=int, nargs="+", default=[3, 5])
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--test-tokens", type=int, default=200_000)
    p.add_argument("--row", type=int, default=1000, help="tokens per scored row")
    p.add_argument("--no-kenlm", action="store_true", help="skip the ARPA file and kenlm")
    p.add_argument("--rounds", type=int, default=7, help="scoring rounds, lmlab and kenlm interleaved")
    p.add_argument("--threads", type=int, default=1, help="lmlab's scoring threads (default 1, as kenlm's score)")
    p.add_argument("--quick", action="store_true", help="300k tokens, 20k test tokens")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args()


def corpus_tokens(vocab_size: int, n_train: int, n_test: int, seed: int = 0):
    """(training tokens (n_train,), held-out tokens (n_test,), id -> token string) from the stdlib corpus."""
    docs = load_corpus("stdlib")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(docs))
    n_held = max(1, len(docs) // 20)
    train_docs, test_docs = [docs[i] for i in order[n_held:]], [docs[i] for i in order[:n_held]]
    tokenizer = train_bpe(train_docs, vocab_size)
    per_doc = [np.array(e.ids, dtype=np.int64) for e in tokenizer.encode_batch(train_docs, add_special_tokens=False)]
    pieces, total = [], 0
    while total < n_train:
        for i in rng.permutation(len(per_doc)):
            pieces.append(per_doc[i])
            total += len(per_doc[i])
            if total >= n_train:
                break
    train = np.concatenate(pieces)[:n_train].astype(np.int64)
    test = np.concatenate([e.ids for e in tokenizer.encode_batch(test_docs, add_special_tokens=False)])[:n_test]
    words = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    return train, test, words


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.quick:
        args.tokens, args.test_tokens = 300_000, 20_000
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    train, test, words = corpus_tokens(args.vocab_size, args.tokens, args.test_tokens)
    prepare_s = time.perf_counter() - t0
    rows = test[: len(test) // args.row * args.row].reshape(-1, args.row)  # (R, row)
    scorer = "C++ scorer" if compiled(SCORER) is not None else "numpy scorer (no C++ compiler)"
    results = []
    for order in args.orders:
        start = time.perf_counter()
        model = fit_ngram(stream_runs(train), order, len(words), "kn")
        build_s = time.perf_counter() - start
        start = time.perf_counter()
        ours = model.token_log_probs(rows).sum(axis=1) / math.log(10)  # (R,) log10; builds the hash index once
        first_call_s = time.perf_counter() - start
        row = {"order": order, "train_tokens": len(train), "ngrams": list(model.tables.sizes), "build_s": build_s,
               "first_score_s": first_call_s,
               "scored_tokens": rows.size, "perplexity": math.exp(-float(ours.sum()) * math.log(10) / rows.size)}
        kenlm_score = None
        if not args.no_kenlm:
            extra, kenlm_score = kenlm_side(model, words, rows, ours)
            row |= extra
        lmlab_s, kenlm_s = [], []
        for _ in range(args.rounds):
            start = time.perf_counter()
            model.token_log_probs(rows)
            lmlab_s.append(time.perf_counter() - start)
            if kenlm_score is not None:
                start = time.perf_counter()
                kenlm_score()
                kenlm_s.append(time.perf_counter() - start)
        row["lmlab_tokens_per_s"] = rows.size / statistics.median(lmlab_s)
        if kenlm_s:
            row["kenlm_tokens_per_s"] = rows.size / statistics.median(kenlm_s)
        results.append(row)
        print(json.dumps(row))
        del model

    print(f"\n{len(train)} training tokens (stdlib BPE {len(words)}, documents repeated), {rows.size} held-out "
          f"tokens in rows of {args.row}; lmlab's {scorer} on {args.threads} thread(s); load average "
          f"{load_before:.1f} before")
    print(f"{'order':>5}{'n-grams':>12}{'build s':>9}{'1st score s':>12}{'lmlab tok/s':>13}{'kenlm tok/s':>13}"
          f"{'ARPA write s':>14}{'kenlm load s':>14}{'max |diff| per token':>22}")
    for r in results:
        print(f"{r['order']:>5}{sum(r['ngrams']):>12}{r['build_s']:>9.1f}{r['first_score_s']:>12.2f}"
              f"{r['lmlab_tokens_per_s']:>13.0f}"
              f"{r.get('kenlm_tokens_per_s', float('nan')):>13.0f}{r.get('arpa_write_s', float('nan')):>14.1f}"
              f"{r.get('kenlm_load_s', float('nan')):>14.1f}{r.get('max_abs_diff_log10', float('nan')):>22.2e}")
    machine = {"cpu_count": os.cpu_count(), "lmlab_scorer": scorer, "threads": args.threads, "python": platform.python_version(), "numpy": np.__version__,
               "load_average_1min": [load_before, os.getloadavg()[0]]}
    settings = {"tokens": args.tokens, "vocab_size": args.vocab_size, "test_tokens": rows.size, "row": args.row,
                "rounds": args.rounds,
                "smoothing": "kn", "corpus": "stdlib, BPE, training documents repeated in reshuffled order",
                "prepare_s": prepare_s}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2))
    print(f"wrote {args.out}")


def kenlm_side(model, words: list[str], rows: np.ndarray, ours: np.ndarray):
    """Write the model's ARPA file, load it in kenlm, score the same rows and compare; returns the
    measures and a function that scores the rows again with kenlm (for the timed rounds)."""
    import kenlm

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.arpa"
        start = time.perf_counter()
        write_arpa(model.tables, words, path)
        write_s = time.perf_counter() - start
        size = path.stat().st_size
        start = time.perf_counter()
        reference = kenlm.Model(str(path))
        load_s = time.perf_counter() - start
    texts = [" ".join(words[i] for i in row) for row in rows]  # built before timing: kenlm reads strings

    def score():
        return np.array([reference.score(text, bos=False, eos=False) for text in texts])
    theirs = score()
    # per token on a few rows (kenlm sums a row in float32, which alone moves a 1000-token sum by ~1e-3)
    per_token = np.array([[p for p, _, _ in reference.full_scores(text, bos=False, eos=False)] for text in texts[:5]])
    ours_per_token = model.token_log_probs(rows[:5]) / math.log(10)
    return {"arpa_write_s": write_s, "arpa_bytes": size, "kenlm_load_s": load_s,
            "max_abs_diff_row_sum_log10": float(np.abs(ours - theirs).max()),
            "max_abs_diff_log10": float(np.abs(ours_per_token - per_token).max())}, score


if __name__ == "__main__":
    main()

"""`lmlab word2vec train|neighbors|analogy|similarity|evaluate|export|import`: word vectors by skip-gram or
CBOW, the questions one asks of them, and the word2vec file format that gensim and the C tool read."""

import dataclasses
import json
from pathlib import Path

from lmlab.cli.common.vocabulary import alias
from lmlab.data.analogies import analogy_questions
from lmlab.data.corpora import EMBEDDED
from lmlab.data.words import corpus_sentences
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.outputs import check_dir_output, check_file_output
from lmlab.models.word2vec.config import Word2VecConfig


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("word2vec", help="word vectors: train (skip-gram/CBOW), neighbours, analogies")
    sub = p.add_subparsers(dest="word2vec_command", required=True)

    t = sub.add_parser("train", help="train word vectors with negative sampling")
    t.add_argument("--data", required=True, help=f"text file, directory, .jsonl, or one of {list(EMBEDDED)}")
    t.add_argument("--out", required=True, help="model directory to write (vectors.safetensors, vocab.txt, "
                                                "config.json)")
    defaults = Word2VecConfig()
    t.add_argument("--method", choices=["sgns", "cbow"], default=defaults.method,
                   help="sgns: skip-gram, a word predicts its neighbours; cbow: the neighbours' mean predicts the word")
    for name, help_text in (("dim", "vector size"), ("window", "largest window (each word draws 1..window)"),
                            ("negatives", "negative words per example"),
                            ("min-count", "drop words seen fewer times"), ("epochs", "passes over the text"),
                            ("batch-size", "examples per SGD step of the torch fallback (the C++ trainer takes one "
                                           "at a time)"), ("seed", "random seed")):
        t.add_argument(f"--{name}", type=int, default=getattr(defaults, name.replace("-", "_")),
                       help=f"{help_text} (default %(default)s)")
    t.add_argument("--subsample", type=float, default=defaults.subsample,
                   help="frequent-word threshold t; 0 turns subsampling off (default %(default)s)")
    t.add_argument("--lr", type=float, help="starting learning rate (default 0.025 sgns, 0.05 cbow)")
    t.set_defaults(run=run_train)

    n = sub.add_parser("neighbors", help="the nearest words by cosine")
    n.add_argument("--model", required=True, help="directory written by `lmlab word2vec train`")
    n.add_argument("--word", required=True, help="the word whose neighbours to list")
    alias(n, "--top", "--k", dest="top", type=int, default=10, help="how many neighbours (default %(default)s)")
    n.set_defaults(run=run_neighbors)

    a = sub.add_parser("analogy", help="a is to b as c is to ? (3CosAdd)")
    a.add_argument("--model", required=True, help="directory written by `lmlab word2vec train`")
    a.add_argument("words", nargs=3, metavar="WORD", help="a b c")
    alias(a, "--top", "--k", dest="top", type=int, default=5, help="how many answers (default %(default)s)")
    a.set_defaults(run=run_analogy)

    s = sub.add_parser("similarity", help="cosine similarity of two words")
    s.add_argument("--model", required=True, help="directory written by `lmlab word2vec train`")
    s.add_argument("words", nargs=2, metavar="WORD", help="the two words to compare")
    s.set_defaults(run=run_similarity)

    e = sub.add_parser("evaluate", help="analogy accuracy over a question file, and word similarity against "
                                        "human ratings")
    e.add_argument("--model", required=True, help="directory written by `lmlab word2vec train`")
    e.add_argument("--questions", help="file of 'a b c d' lines with ': section' headers (default: the "
                                       "questions of the generated `analogies` corpus)")
    e.add_argument("--pairs", nargs="+", default=[], metavar="FILE",
                   help="word-similarity files ('word1 word2 score' lines, as WordSim-353 and SimLex-999): "
                        "Spearman's and Pearson's correlation of the cosines with the scores")
    e.add_argument("--gensim-benchmarks", action="store_true",
                   help="the real benchmarks gensim ships (questions-words, WordSim-353, SimLex-999), in place of "
                        "--questions and --pairs; needs gensim installed")
    e.add_argument("--json", action="store_true", help="print one JSON object: analogies (per section) and "
                                                       "word_pairs (per file)")
    e.set_defaults(run=run_evaluate)

    x = sub.add_parser("export", help="write the vectors as a word2vec file (text, or --binary), for gensim & co.")
    x.add_argument("--model", required=True, help="directory written by `lmlab word2vec train`")
    x.add_argument("--out", required=True, help="the word2vec file to write (.txt or .bin)")
    x.add_argument("--binary", action="store_true", help="float32 rows, as the C tool's -binary 1 writes them")
    x.set_defaults(run=run_export)

    i = sub.add_parser("import", help="read a word2vec file (text or binary) into a model directory")
    i.add_argument("--data", required=True, help="a word2vec .txt or .bin file (gensim's save_word2vec_format)")
    i.add_argument("--out", required=True, help="model directory to write, which the other subcommands read")
    i.set_defaults(run=run_import)


def run_train(args) -> None:
    from lmlab.data.corpora import load_corpus
    from lmlab.models.word2vec.vectors import save_vectors
    from lmlab.recipes.word2vec import train_word2vec

    cfg = Word2VecConfig(method=args.method, dim=args.dim, window=args.window, negatives=args.negatives,
                         min_count=args.min_count, subsample=args.subsample, epochs=args.epochs, lr=args.lr,
                         batch_size=args.batch_size, seed=args.seed)
    out = Path(args.out)
    check_dir_output(out, "--out")
    result = train_word2vec(corpus_sentences(load_corpus(args.data)), cfg)
    with atomic_path(out) as tmp:
        save_vectors(result.vectors, tmp, dataclasses.asdict(cfg) | {"data": args.data})
    words_per_s = result.trained_words / result.seconds
    print(f"trained {len(result.vectors.vocab) - 1} word vectors of size {cfg.dim} on {result.corpus_words} words "
          f"x {cfg.epochs} epochs in {result.seconds:.1f}s ({words_per_s:,.0f} words/s); saved {out}")


def run_export(args) -> None:
    from lmlab.models.word2vec.vectors import export_word2vec, load_vectors

    vectors = load_vectors(args.model)
    out = Path(args.out)
    check_file_output(out, "--out")
    with atomic_path(out) as tmp:
        export_word2vec(vectors, tmp, args.binary)
    print(f"wrote {len(vectors.vocab) - 1} vectors of size {vectors.vectors.shape[1]} to {out} "
          f"(word2vec {'binary' if args.binary else 'text'} format)")


def run_import(args) -> None:
    from lmlab.models.word2vec.vectors import import_word2vec, save_vectors

    out = Path(args.out)
    check_dir_output(out, "--out")
    vectors = import_word2vec(Path(args.data))
    with atomic_path(out) as tmp:
        save_vectors(vectors, tmp, {"imported_from": str(args.data)})
    print(f"imported {len(vectors.vocab) - 1} vectors of size {vectors.vectors.shape[1]}; saved {out}")


def run_neighbors(args) -> None:
    from lmlab.models.word2vec.vectors import load_vectors

    if args.top < 1:
        raise LmlabError(f"--top must be at least 1, got {args.top}")
    for word, cosine in load_vectors(args.model).neighbors(args.word.lower(), args.top):
        print(f"{cosine:.4f}  {word}")


def run_analogy(args) -> None:
    from lmlab.models.word2vec.vectors import load_vectors

    if args.top < 1:
        raise LmlabError(f"--top must be at least 1, got {args.top}")
    a, b, c = (w.lower() for w in args.words)
    for word, cosine in load_vectors(args.model).analogy(a, b, c, args.top):
        print(f"{cosine:.4f}  {word}")


def run_similarity(args) -> None:
    from lmlab.models.word2vec.vectors import load_vectors

    first, second = (w.lower() for w in args.words)
    print(f"{load_vectors(args.model).similarity(first, second):.4f}")


def run_evaluate(args) -> None:
    from lmlab.eval.analogy import analogy_accuracy, read_questions
    from lmlab.eval.word_similarity import pair_similarity, read_pairs
    from lmlab.models.word2vec.vectors import load_vectors

    questions_file, pair_files = (gensim_benchmarks() if args.gensim_benchmarks else (args.questions, args.pairs))
    vectors = load_vectors(args.model)
    questions = read_questions(questions_file) if questions_file else analogy_questions()
    scores = analogy_accuracy(vectors, questions).to_dict()
    pairs = {Path(f).stem: pair_similarity(vectors, read_pairs(f)).to_dict() for f in pair_files}
    if args.json:
        print(json.dumps({"analogies": scores, "word_pairs": pairs}))
        return
    for name, s in scores.items():
        print(f"{name:<24} {s['accuracy']:7.2%}  ({s['correct']}/{s['asked']}, {s['skipped']} skipped)")
    for name, s in pairs.items():
        print(f"{name:<24} Spearman {s['spearman']:.3f}, Pearson {s['pearson']:.3f}  ({s['pairs']} pairs, "
              f"{s['skipped']} skipped)")


def gensim_benchmarks() -> tuple[str, list[str]]:
    """The analogy questions and word-similarity files that gensim ships with its tests."""
    try:
        from gensim.test.utils import datapath
    except ImportError:
        raise LmlabError("--gensim-benchmarks reads the benchmark files gensim ships: pip install gensim, or pass "
                         "--questions and --pairs files") from None
    return datapath("questions-words.txt"), [datapath("wordsim353.tsv"), datapath("simlex999.txt")]

"""`lmlab rag eval`: closed book against open book on questions about invented people, and recall@k."""

import argparse
import json
import sys

from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.cli.rag.index import DEFAULT_ENCODER
from lmlab.data.invented_facts import invented_facts
from lmlab.errors import LmlabError
from lmlab.io.outputs import check_file_output
from lmlab.rag.choices import KS

MAX_PEOPLE = 1000
EVAL_WORDS, EVAL_OVERLAP = 30, 0  # passages of two or three sentences: recall@1 must find the right one


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="closed- vs open-book accuracy on invented facts, and retrieval recall@k",
        description="Generate biographies of invented people (names, towns, years, numbers no model has seen) "
                    "and four questions with exact answers about each; index the biographies, then ask every "
                    "question closed book and with the top k passages in the prompt. Prints recall@k of the "
                    "retriever, and the model's accuracy: the true answer ranked first among the relation's "
                    "candidates, and found in the greedy reply.",
        epilog="example:\n  lmlab rag eval --model smollm2-135m-instruct --people 10 --png rag.png",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the chat model asked (zoo name, directory, .gguf)")
    add_dtype_arg(p)
    p.add_argument("--encoder", default=DEFAULT_ENCODER, help=f"sentence encoder of the index (default "
                                                              f"{DEFAULT_ENCODER})")
    p.add_argument("--people", type=int, default=10, help=f"invented people, four questions each, 2..{MAX_PEOPLE} "
                                                          "(default 10)")
    p.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0)")
    p.add_argument("--top", default=",".join(map(str, KS)), help="passages in the prompt, comma-separated (default "
                                                                 "1,3,5); also the k of recall@k")
    p.add_argument("--answer-top", type=int, default=3,
                   help="the --top whose greedy replies are generated, as closed book's are (default 3)")
    p.add_argument("--passage-words", type=int, default=EVAL_WORDS, help=f"default {EVAL_WORDS}")
    p.add_argument("--overlap", type=int, default=EVAL_OVERLAP, help=f"default {EVAL_OVERLAP}")
    p.add_argument("--json", action="store_true", help="print one JSON object (every answer included)")
    p.add_argument("--png", help="draw accuracy and recall against the passages in the prompt")
    p.set_defaults(run=run)


def parse_ks(text: str) -> tuple[int, ...]:
    """The sorted k's of --top."""
    try:
        ks = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise LmlabError(f"--top {text!r} is not a comma-separated list of whole numbers, e.g. 1,3,5") from None
    if not ks or ks[0] < 1:
        raise LmlabError(f"--top {text!r}: every one must be at least 1")
    return ks


def run(args) -> None:
    from lmlab.models.load import load, load_encoder
    from lmlab.rag.evaluate import closed_vs_open
    from lmlab.rag.index import build_index
    from lmlab.rag.passages import check_sizes, split_corpus
    from lmlab.rag.retrieve import Retriever

    ks = parse_ks(args.top)
    if not 2 <= args.people <= MAX_PEOPLE:
        raise LmlabError(f"--people {args.people} must be in 2..{MAX_PEOPLE}")
    if args.answer_top not in ks:
        raise LmlabError(f"--answer-top {args.answer_top} must be one of --top ({args.top})")
    check_sizes(args.passage_words, args.overlap)
    if args.png:
        check_file_output(args.png, "--png")
    documents, facts = invented_facts(args.people, args.seed)
    passages = split_corpus(documents, args.passage_words, args.overlap)
    encoder, encoder_tokenizer = load_encoder(args.encoder)
    index = build_index(encoder.eval(), encoder_tokenizer, passages, args.encoder, args.passage_words, args.overlap)
    model, tokenizer = load(args.model, args.dtype, activations=args.activations)
    print(f"{len(facts)} questions about {args.people} invented people, {len(passages)} passages", file=sys.stderr)
    result = closed_vs_open(model.eval(), tokenizer, Retriever(index, encoder, encoder_tokenizer), facts, ks,
                            args.answer_top, show_progress=True)
    result = {"model": args.model, "encoder": args.encoder, "passages": len(passages), **result}
    if args.png:
        save_chart(args.png, result, ks)
    if args.json:
        print(json.dumps(result))
        return
    print_table(result, ks)


def print_table(result: dict, ks: tuple[int, ...]) -> None:
    """Recall@k, then accuracy by relation closed book and open book."""
    print(f"{result['model']}: {result['questions']} questions, {result['passages']} passages by {result['encoder']}")
    print("retrieval  " + "  ".join(f"recall@{k} {result['recall'][str(k)]:.1%}" for k in ks))
    ways = list(result["accuracy"])
    print(f"{'ranked first':<14}" + "".join(f"{w:>10}" for w in ways) + f"{'chance':>10}")
    for name, row in [*result["relations"].items(), ("overall", result["accuracy"])]:
        print(f"{name:<14}" + "".join(f"{row[w]:>10.1%}" for w in ways) +
              (f"{result['chance']:>10.1%}" if name == "overall" else ""))
    print("answer in greedy reply  " + "  ".join(f"{w} {v:.1%}" for w, v in result["generated"].items()))


def save_chart(path: str, result: dict, ks: tuple[int, ...]) -> None:
    """Accuracy (k = 0 is closed book) and recall@k against k, with chance."""
    from lmlab.figures import save_line_plot

    xs = [0, *ks]
    series = {"accuracy (ranked first)": (xs, list(result["accuracy"].values())),
              "recall at k": (list(ks), [result["recall"][str(k)] for k in ks]),
              "chance": (xs, [result["chance"]] * len(xs))}
    save_line_plot(path, series, title=f"closed vs open book: {result['model']}",
                   xlabel="passages in the prompt (0 = closed book)", ylabel="share of questions")

"""`lmlab eval cloze`: zero-shot LAMBADA-style cloze, predicting each passage's last word (accuracy of
the greedy whole word, perplexity of the true one), from the full passage and from its last sentence."""

import json

from lmlab.cli.common.adapter_arg import add_adapter_arg, load_decoder
from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.cli.common.vocabulary import alias
from lmlab.data.cloze_passages import MAX_PASSAGES, cloze_passages, read_passages
from lmlab.errors import LmlabError

DEFAULT_PASSAGES = 100


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("cloze", help="LAMBADA-style last-word prediction: accuracy and last-word perplexity")
    p.add_argument("--model", required=True, help="zoo name or model directory (a decoder)")
    add_dtype_arg(p)
    add_adapter_arg(p)
    alias(p, "--data", "--file", dest="data", help="passages, one per non-empty line, each ending with the word to "
                                                  "predict (default: embedded short stories)")
    p.add_argument("--passages", type=int, help=f"embedded stories to generate (default {DEFAULT_PASSAGES})")
    p.add_argument("--seed", type=int, default=0, help="which embedded stories are drawn (default 0)")
    p.add_argument("--limit", type=int, help="score only the first N passages")
    p.add_argument("--no-last-sentence", action="store_true",
                   help="skip the second pass that predicts each word from its passage's last sentence only")
    p.add_argument("--json", action="store_true", help="print one JSON object: passages, accuracy, perplexity, "
                                                       "last_sentence {accuracy, perplexity}")
    p.set_defaults(run=run_cloze)


def run_cloze(args) -> None:
    from lmlab.eval.cloze import evaluate_cloze

    if args.limit is not None and not 1 <= args.limit <= MAX_PASSAGES:
        raise LmlabError(f"--limit {args.limit} must be between 1 and {MAX_PASSAGES:,}")
    if args.data and args.passages is not None:
        raise LmlabError("--passages sets how many embedded stories are drawn; with --data use --limit")
    passages = read_passages(args.data) if args.data else cloze_passages(
        DEFAULT_PASSAGES if args.passages is None else args.passages, args.seed)
    passages = passages[:args.limit]
    model, tokenizer = load_decoder(args)
    result = evaluate_cloze(model.eval(), tokenizer, passages, not args.no_last_sentence, show_progress=True)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'context':<16}{'accuracy':>10}{'last-word ppl':>15}   ({result['passages']} passages)")
    print(f"{'full passage':<16}{result['accuracy']:>10.1%}{result['perplexity']:>15.4g}")
    if "last_sentence" in result:
        short = result["last_sentence"]
        print(f"{'last sentence':<16}{short['accuracy']:>10.1%}{short['perplexity']:>15.4g}")

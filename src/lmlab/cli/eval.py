"""`lmlab eval perplexity`: how well a model predicts a text file."""

import json

import torch

from lmlab.data.sources import read_texts
from lmlab.errors import LmlabError
from lmlab.eval.perplexity import perplexity
from lmlab.io.load import load


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a model")
    sub = p.add_subparsers(dest="eval_command", required=True)
    ppl = sub.add_parser("perplexity", help="perplexity of a text file (exp of mean NLL of tokens 2..n)")
    ppl.add_argument("--model", required=True)
    ppl.add_argument("--file", required=True)
    ppl.add_argument("--stride", type=int, help="tokens scored per window for long texts (default: context/2)")
    ppl.add_argument("--json", action="store_true", help="print one JSON object: tokens, nll_sum, perplexity")
    ppl.set_defaults(run=run_perplexity)


def run_perplexity(args) -> None:
    model, tokenizer = load(args.model)
    text = "\n".join(read_texts(args.file))
    ids = tokenizer.encode(text)
    if len(ids) < 2:
        raise LmlabError(f"'{args.file}' has {len(ids)} token(s); perplexity needs at least 2")
    result = perplexity(model, torch.tensor(ids), model.config.context_length, args.stride)
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print(f"perplexity {result.perplexity:.4f} over {result.tokens} tokens (NLL {result.nll_sum:.2f} nats)")

"""`lmlab eval perplexity`: how well a model predicts a text file (exp of the mean NLL of its tokens)."""

import json
import math

from lmlab.cli.common.adapter_arg import add_adapter_arg, load_decoder
from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.cli.common.vocabulary import alias
from lmlab.data.sources import read_texts
from lmlab.errors import LmlabError


def add_parser(sub) -> None:
    ppl = sub.add_parser("perplexity", help="perplexity of a text file (exp of mean NLL of tokens 2..n)")
    ppl.add_argument("--model", required=True, help="zoo name, model or run directory, .gguf, HF directory")
    add_dtype_arg(ppl)
    add_adapter_arg(ppl)
    alias(ppl, "--data", "--file", dest="data", required=True, help="the text file to score")
    ppl.add_argument("--context", type=int, metavar="N",
                     help="tokens per window for long texts (default: the sequence length the model was trained on, "
                          "else its context length)")
    ppl.add_argument("--stride", type=int, help="tokens scored per window for long texts (default: context/2)")
    ppl.add_argument("--json", action="store_true", help="print one JSON object: tokens, nll_sum, perplexity")
    ppl.set_defaults(run=run_perplexity)


def run_perplexity(args) -> None:
    import torch

    from lmlab.eval.perplexity import perplexity

    if args.context is not None and args.context < 2:
        raise LmlabError(f"--context {args.context} must be at least 2 (a token and its prefix)")
    if args.stride is not None and args.stride < 1:
        raise LmlabError(f"--stride {args.stride} must be at least 1")
    model, tokenizer = load_decoder(args)
    context = window_length(model.config, args.context)
    if args.stride is not None and args.stride > context:
        raise LmlabError(f"--stride {args.stride} exceeds the window of {context} tokens, so some tokens would "
                         "go unscored; lower --stride")
    text = "\n".join(read_texts(args.data))
    ids = tokenizer.encode(text)
    if len(ids) < 2:
        raise LmlabError(f"'{args.data}' has {len(ids)} token(s); perplexity needs at least 2")
    result = perplexity(model, torch.tensor(ids), context, args.stride, show_progress=True)
    if not math.isfinite(result.perplexity):
        raise LmlabError(f"{args.model} gives a perplexity of {result.perplexity} on '{args.data}' (NLL "
                         f"{result.nll_sum:.4g} nats): its weights are damaged or far out of range, use a good copy")
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print(f"perplexity {result.perplexity:.4f} over {result.tokens} tokens (NLL {result.nll_sum:.2f} nats)")


def window_length(config, context: int | None) -> int:
    """The perplexity window: `context` when given (at most the model's context length), else the
    sequence length the model was pre-trained on (a model reads best at the length it learned), else
    its context length."""
    if context is not None:
        if context > config.context_length:
            raise LmlabError(f"--context {context} exceeds the model's context of {config.context_length} tokens; "
                             "lower --context")
        return context
    return getattr(config, "trained_context", None) or config.context_length

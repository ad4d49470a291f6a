"""`lmlab generate`: continue a prompt with a trained model, printing tokens as they arrive."""

import sys

from lmlab.generation.generate import stream_tokens
from lmlab.io.load import load


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate text from a prompt")
    p.add_argument("--model", required=True, help="model directory or lmlab run directory")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--top-k", type=int)
    p.add_argument("--top-p", type=float)
    p.add_argument("--seed", type=int)
    p.set_defaults(run=run)


def run(args) -> None:
    model, tokenizer = load(args.model)
    prompt_ids = tokenizer.encode(args.prompt)
    new_ids, printed = [], ""
    sys.stdout.write(args.prompt)
    for token in stream_tokens(model, prompt_ids, args.max_new_tokens, args.temperature, args.top_k, args.top_p,
                               args.seed, tokenizer.eos_id):
        new_ids.append(token)
        text = tokenizer.decode(new_ids)
        if not text.endswith("\ufffd"):  # wait until a multi-byte character is complete
            sys.stdout.write(text[len(printed):])
            sys.stdout.flush()
            printed = text
    sys.stdout.write(tokenizer.decode(new_ids)[len(printed):] + "\n")

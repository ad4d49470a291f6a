"""`lmlab logprobs`: the model's top guesses for the token after a prompt, with log-probabilities."""

import argparse
import json
import math

from lmlab.cli.common.adapter_arg import load_decoder
from lmlab.cli.common.model_dtype import add_dtype_arg


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "logprobs", help="the most likely next tokens after a prompt",
        description="Show the top K tokens of the next-token distribution after PROMPT (plain text, no special "
                    "tokens unless --add-bos), with their log-probabilities.",
        epilog="examples:\n"
               "  lmlab logprobs --model smollm2-135m --prompt 'The capital of France is' --top 5\n"
               "  lmlab logprobs --model M --prompt 'Zini' --top 3 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model directory, lmlab run directory, .gguf file or zoo name")
    add_dtype_arg(p)
    p.add_argument("--prompt", required=True, help="the text whose next token to predict")
    p.add_argument("--top", type=int, default=10, metavar="K", help="how many tokens to show (default 10)")
    p.add_argument("--add-bos", action="store_true", help="put the tokenizer's bos token before the prompt")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object: {"prompt_tokens": n, "top": [{"id", "text", "logprob"}, …]}')
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.generation.logprobs import top_logprobs

    model, tokenizer = load_decoder(args)
    prompt_ids = tokenizer.encode(args.prompt, add_bos=args.add_bos)
    top = [{"id": i, "text": tokenizer.token_text(i), "logprob": lp}
           for i, lp in top_logprobs(model, prompt_ids, args.top)]
    if args.json:
        print(json.dumps({"prompt_tokens": len(prompt_ids), "top": top}, ensure_ascii=False))
        return
    print(f"next token after {len(prompt_ids)} prompt tokens:")
    print(f"{'id':>8}  {'logprob':>9}  {'prob':>7}  text")
    for t in top:
        text = json.dumps(t["text"], ensure_ascii=False)  # quoted, so spaces and newlines show
        print(f"{t['id']:>8}  {t['logprob']:>9.4f}  {math.exp(t['logprob']):>7.2%}  {text}")

"""`lmlab inspect logit-lens`: what a decoder would predict next if it stopped at each layer.

Every layer's residual stream (0 = the token embeddings) goes through the final norm and the LM head;
the text output and the `--png` table show each layer's top token at each position, the JSON the
top K with their probabilities.
"""

import json

from lmlab.errors import LmlabError
from lmlab.io.outputs import check_file_output

MAX_TOKENS = 512  # each layer and position gives K predictions
CELL_CHARS = 8  # a cell of the text table and the PNG shows at most this many characters of a token


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("logit-lens", help="each layer's next-token prediction: its residual stream through "
                                                 "the final norm and the LM head (decoders)")
    p.add_argument("--model", required=True, help="zoo name, .gguf file, model or run directory of a decoder")
    p.add_argument("--text", required=True, help="the text to read")
    p.add_argument("--top", type=int, default=5, metavar="K", help="predictions per layer and position in the "
                                                                   "JSON (default 5)")
    p.add_argument("--png", help="draw a table (rows: layers, columns: positions) of each top token, shaded by "
                                 "its probability, into this PNG")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object: {"tokens": [...], "layers": [layer][position][k] of '
                        '{"token", "id", "prob"}}; layer 0 is the embeddings, the last the model\'s output')
    p.set_defaults(run=run_logit_lens)


def run_logit_lens(args) -> None:
    from lmlab.figures import axis_label, save_heatmap
    from lmlab.inspect.logit_lens import logit_lens
    from lmlab.inspect.subject import load_subject

    if args.top < 1:
        raise LmlabError(f"--top {args.top} must be at least 1")
    if args.png:
        check_file_output(args.png, "--png")
    subject = load_subject(args.model)
    if subject.kind != "decoder":
        raise LmlabError(f"the logit lens reads decoder-only models and {args.model} is an {subject.kind}; "
                         "pick a decoder with --model")
    ids, tokens = subject.tokens(args.text)
    limit = min(MAX_TOKENS, subject.model.config.context_length)
    if not 1 <= len(tokens) <= limit:
        raise LmlabError(f"--text has {len(tokens)} tokens; the logit lens reads 1 to {limit}, change the text")
    lens = logit_lens(subject.model, ids, args.top)
    text = subject.tokenizer.token_text
    top_tokens = [[[text(i) for i in position] for position in layer] for layer in lens.ids.tolist()]  # (L+1, T, K)
    if args.png:
        cells = [[_cell(position[0]) for position in layer] for layer in top_tokens]
        save_heatmap(args.png, lens.probs[:, :, 0].numpy(), [str(i) for i in range(len(cells))],
                     [axis_label(t) for t in tokens], title=f"{args.model}: logit lens, top-1 next token per layer",
                     value_range=(0.0, 1.0), cell_text=cells)
    if args.json:
        layers = [[[{"token": t, "id": i, "prob": p} for t, i, p in zip(*top)] for top in zip(*layer)]  # (L+1, T, K)
                  for layer in zip(top_tokens, lens.ids.tolist(), lens.probs.tolist())]
        print(json.dumps({"tokens": tokens, "top_k": args.top, "layers": layers}))
        return
    _print_table(tokens, top_tokens, lens.probs[:, :, 0].tolist())
    if args.png:
        print(f"logit lens table saved to {args.png}")


def _cell(token: str) -> str:
    from lmlab.figures import axis_label

    label = axis_label(token)
    return label if len(label) <= CELL_CHARS else label[:CELL_CHARS - 2] + ".."


def _print_table(tokens: list[str], top_tokens: list, top_probs: list) -> None:
    """Rows: layers; columns: positions; each cell the top-1 next token and its probability."""
    width = CELL_CHARS + 6
    print("layer " + "".join(f"{_cell(t):>{width}}" for t in tokens))
    for layer, (row, probs) in enumerate(zip(top_tokens, top_probs)):
        print(f"{layer:>5} " + "".join(f"{_cell(k[0]) + f' {p:.2f}':>{width}}" for k, p in zip(row, probs)))

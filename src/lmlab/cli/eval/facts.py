"""`lmlab eval facts`: LAMA-style factual probing over the embedded fact table, P@1 and P@10 per
relation; a causal LM ranks each relation's candidate objects, a masked LM its vocabulary at [MASK]."""

import json

from lmlab.cli.common.adapter_arg import add_adapter_arg, load_decoder
from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.data.facts import RELATIONS
from lmlab.errors import LmlabError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("facts", help="factual probing (LAMA): P@1 / P@10 of true objects per relation")
    p.add_argument("--model", required=True, help="zoo name or model directory: a decoder (ranks candidate "
                                                  "objects) or an encoder with its MLM head (fills [MASK])")
    add_dtype_arg(p)
    add_adapter_arg(p)
    p.add_argument("--relations", default=",".join(RELATIONS),
                   help=f"comma-separated relations to probe (default all: {', '.join(RELATIONS)})")
    p.add_argument("--json", action="store_true", help="print one JSON object: kind, relations (facts, scored, "
                                                       "skipped, p_at_1, p_at_10), overall, facts (each rank)")
    p.set_defaults(run=run_facts)


def run_facts(args) -> None:
    from lmlab.eval.facts import evaluate_facts
    from lmlab.models.masked_lm import is_encoder, load_masked_lm

    relations = [parse_relation(name) for name in dict.fromkeys(args.relations.split(","))]
    masked = is_encoder(args.model)
    if masked and (args.dtype or args.adapter):
        flag = "--dtype" if args.dtype else "--adapter"
        raise LmlabError(f"{flag} applies to decoders; '{args.model}' is an encoder, leave {flag} out")
    model, tokenizer = load_masked_lm(args.model) if masked else load_decoder(args)
    result = evaluate_facts(model.eval(), tokenizer, relations, masked, show_progress=True)
    if args.json:
        print(json.dumps(result))
        return
    over = "the vocabulary at [MASK]" if masked else "each relation's candidate objects"
    print(f"{args.model}: true object ranked among {over}")
    print(f"{'relation':<12}{'facts':>7}{'skipped':>9}{'P@1':>8}{'P@10':>8}" + ("" if masked else f"{'chance@1':>10}"))
    for name, row in [*result["relations"].items(), ("overall", result["overall"])]:
        chance = f"{1 / row['candidates']:>10.1%}" if "candidates" in row else ""
        print(f"{name:<12}{row['facts']:>7}{row['skipped']:>9}{row['p_at_1']:>8.1%}{row['p_at_10']:>8.1%}{chance}")


def parse_relation(name: str):
    """The embedded relation called `name` (spaces around it ignored)."""
    relation = RELATIONS.get(name.strip())
    if relation is None:
        raise LmlabError(f"--relations: unknown relation '{name.strip()}'; choose from {', '.join(RELATIONS)}")
    return relation

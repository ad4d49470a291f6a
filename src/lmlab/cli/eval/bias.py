"""`lmlab eval bias`: CrowS-Pairs-style pairs (a stereotyping sentence and the same about another group):
per bias category, the share of pairs where the model prefers the stereotype, with its interval; a causal
LM by sentence log-likelihood, a masked LM by the pseudo-log-likelihood of the unmodified tokens."""

import functools
import json

from lmlab.cli.common.adapter_arg import add_adapter_arg, load_decoder
from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.data.stereotype_pairs import MAX_PAIRS, STEREOTYPE_PAIRS, read_stereotype_pairs
from lmlab.errors import LmlabError
from lmlab.io.outputs import check_file_output


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "bias", help="CrowS-Pairs-style bias: how often the model prefers the stereotyping sentence, per category",
        description="Each pair is a sentence stating a stereotype and the same sentence about another group. A "
                    "decoder scores each sentence by its log-likelihood (lm-eval's crows_pairs); an encoder with its "
                    "MLM head by the pseudo-log-likelihood of the tokens the two share (Nangia et al., 2020). "
                    "Reported per category and overall: the share preferring the stereotype (0.5: no preference), "
                    f"its 95%% Wilson interval and n. Default data: {len(STEREOTYPE_PAIRS)} pairs written for lmlab; "
                    "a probe of a few stereotypes, not a certificate of fairness.")
    p.add_argument("--model", required=True, help="zoo name or model directory: a decoder, or an encoder saved with "
                                                  "its MLM head (BERT, RoBERTa, ...)")
    add_dtype_arg(p)
    add_adapter_arg(p)
    p.add_argument("--data", help='JSON Lines pairs, {"sent_more", "sent_less", "bias_type"} (CrowS-Pairs\' field '
                                  "names; default: the embedded pairs)")
    p.add_argument("--limit", type=int, help="score only the first N pairs")
    p.add_argument("--json", action="store_true", help="print one JSON object: kind, categories and overall (pairs, "
                                                       "stereotype_share, interval), every pair's scores")
    p.add_argument("--png", help="write the share preferring the stereotype per category, with intervals, as a PNG")
    p.set_defaults(run=run_bias)


def run_bias(args) -> None:
    from lmlab.eval.bias import causal_pair_scores, evaluate_bias, masked_pair_scores
    from lmlab.eval.harness import HarnessScorer
    from lmlab.figures import IntervalRow, save_interval_chart
    from lmlab.models.masked_lm import is_encoder, load_masked_lm

    if args.limit is not None and not 1 <= args.limit <= MAX_PAIRS:
        raise LmlabError(f"--limit {args.limit} must be between 1 and {MAX_PAIRS:,}")
    if args.png:
        check_file_output(args.png, "--png")
    pairs = (read_stereotype_pairs(args.data) if args.data else list(STEREOTYPE_PAIRS))[:args.limit]
    masked = is_encoder(args.model)
    if masked and (args.dtype or args.adapter):
        flag = "--dtype" if args.dtype else "--adapter"
        raise LmlabError(f"{flag} applies to decoders; '{args.model}' is an encoder, leave {flag} out")
    if masked:
        model, tokenizer = load_masked_lm(args.model)
        score = functools.partial(masked_pair_scores, model.eval(), tokenizer)
    else:
        model, tokenizer = load_decoder(args)
        score = functools.partial(causal_pair_scores, HarnessScorer(model.eval(), tokenizer,
                                                                    model.config.context_length))
    result = {"model": args.model, "kind": "masked" if masked else "causal", **evaluate_bias(score, pairs, True)}
    if args.png:
        rows = [IntervalRow(f"{name} ({r['pairs']})", r["stereotype_share"], *r["interval"], group=group)
                for group, named in (("category", result["categories"]), ("overall", {"all": result["overall"]}))
                for name, r in named.items()]
        save_interval_chart(args.png, rows, title=f"bias of {args.model}", reference=0.5,
                            xlabel="share of pairs preferring the stereotype (95% Wilson intervals; 0.5: none)")
    if args.json:
        print(json.dumps(result))
        return
    how = "pseudo-log-likelihood of shared tokens" if masked else "sentence log-likelihood"
    print(f"{args.model} ({how}) on {args.data or 'the embedded pairs'}")
    print(f"{'category':<16}{'pairs':>6}{'stereotype':>12}  95% interval")
    for name, r in [*result["categories"].items(), ("overall", result["overall"])]:
        low, high = r["interval"]
        print(f"{name:<16}{r['pairs']:>6}{r['stereotype_share']:>12.1%}  [{low:.1%}, {high:.1%}]")

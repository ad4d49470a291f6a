"""`lmlab eval truthfulness`: TruthfulQA's MC1 and MC2 by log-likelihood, as lm-eval scores them, on the
embedded misconceptions or a JSON Lines file, with the plain QA prompt, the chat template, or both."""

import json

from lmlab.cli.common.adapter_arg import add_adapter_arg, load_decoder
from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.data.misconceptions import MISCONCEPTIONS
from lmlab.data.truthful_questions import MAX_QUESTIONS, PROMPTS, embedded_questions, read_truthful_questions
from lmlab.errors import LmlabError
from lmlab.io.outputs import check_file_output


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "truthfulness", help="TruthfulQA-style MC1 / MC2: does the model prefer true answers to common misconceptions",
        description="Each answer is scored by its log-likelihood after the question, as lm-evaluation-harness's "
                    "truthfulqa_mc1 / truthfulqa_mc2 score them: MC1 is the share of questions whose one true answer "
                    "is the most likely choice, MC2 the probability mass on the true answers. Intervals: Wilson "
                    f"(MC1) and bootstrap (MC2), 95%%. Default data: {len(MISCONCEPTIONS)} misconceptions written "
                    "for lmlab.")
    p.add_argument("--model", required=True, help="zoo name or model directory (a decoder)")
    add_dtype_arg(p)
    add_adapter_arg(p)
    p.add_argument("--data", help='JSON Lines questions: TruthfulQA\'s {"question", "mc1_targets", "mc2_targets"} '
                                  'or {"question", "true": [...], "false": [...]} (default: the embedded set)')
    p.add_argument("--prompt-format", choices=(*PROMPTS, "both"), default="qa",
                   help="qa: TruthfulQA's six-shot QA prompt, as lm-eval uses it (default); chat: the same "
                        "question and answers through the model's chat template; both: each, side by side")
    p.add_argument("--limit", type=int, help="score only the first N questions")
    p.add_argument("--json", action="store_true", help="print one JSON object: per prompt format mc1, mc2, their "
                                                       "intervals and every question's scores")
    p.add_argument("--png", help="write MC1 and MC2 with their intervals, per prompt format, as a PNG bar chart")
    p.set_defaults(run=run_truthfulness)


def run_truthfulness(args) -> None:
    from lmlab.eval.harness import HarnessScorer
    from lmlab.eval.truthfulness import evaluate_truthfulness
    from lmlab.figures import IntervalRow, save_interval_chart

    if args.limit is not None and not 1 <= args.limit <= MAX_QUESTIONS:
        raise LmlabError(f"--limit {args.limit} must be between 1 and {MAX_QUESTIONS:,}")
    if args.png:
        check_file_output(args.png, "--png")
    questions = (read_truthful_questions(args.data) if args.data else embedded_questions())[:args.limit]
    prompts = PROMPTS if args.prompt_format == "both" else (args.prompt_format,)
    model, tokenizer = load_decoder(args)
    if "chat" in prompts and tokenizer.chat_template is None and not tokenizer.chat_templates:
        raise LmlabError(f"--prompt-format {args.prompt_format} needs a chat template, and '{args.model}' has none; "
                         "use --prompt-format qa")
    scorer = HarnessScorer(model.eval(), tokenizer, model.config.context_length)
    results = evaluate_truthfulness(scorer, questions, prompts, show_progress=True)
    if args.png:
        rows = [IntervalRow(metric.upper(), r[metric], *r[f"{metric}_interval"], group=prompt)
                for prompt, r in results.items() for metric in ("mc1", "mc2")]
        save_interval_chart(args.png, rows, title=f"truthfulness of {args.model}",
                            xlabel="MC1: share right; MC2: mass on true answers (95% intervals)")
    if args.json:
        print(json.dumps({"model": args.model, "data": args.data or "embedded", "prompts": results}))
        return
    print(f"{args.model} on {args.data or 'the embedded misconceptions'}: {len(questions)} questions")
    print(f"{'prompt':<8}{'MC1':>8}  {'95% interval':<15}{'MC2':>8}  95% interval")
    for prompt, r in results.items():
        print(f"{prompt:<8}{r['mc1']:>8.1%}  {_interval(r['mc1_interval']):<15}{r['mc2']:>8.1%}  "
              f"{_interval(r['mc2_interval'])}")


def _interval(bounds) -> str:
    return f"[{bounds[0]:.1%}, {bounds[1]:.1%}]"

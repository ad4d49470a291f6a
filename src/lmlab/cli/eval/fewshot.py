"""`lmlab eval fewshot`: accuracy against the number of demonstrations in the prompt (in-context
learning), with gold or random demonstration labels, direct or chain-of-thought answers."""

import json

from lmlab.cli.common.adapter_arg import add_adapter_arg, load_decoder
from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.errors import LmlabError
from lmlab.eval.prompt_tasks import TASKS, load_task
from lmlab.io.outputs import check_file_output

MAX_LIMIT = 100_000
MAX_SAMPLES = 64  # chains per question for self-consistency, decoded as one batch
MAX_NEW_TOKENS = 512


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("fewshot", help="accuracy vs number of demonstrations (few-shot prompting, "
                                              "random labels, chain of thought, self-consistency)")
    p.add_argument("--model", required=True, help="zoo name or model directory (a decoder; chat models are "
                                                  "prompted as plain text)")
    add_dtype_arg(p)
    add_adapter_arg(p)
    p.add_argument("--data", required=True, help=f"an embedded task ({', '.join(TASKS)}) or a JSONL file of "
                                                 '{"input", "target"} or {"question", "choices", "answer"} lines')
    p.add_argument("--shots", default="0,1,4,8", help="comma-separated numbers of demonstrations (default 0,1,4,8)")
    p.add_argument("--limit", type=int, default=50, help="test questions asked (default 50)")
    p.add_argument("--seed", type=int, default=0, help="which demonstrations are drawn (default 0)")
    p.add_argument("--demo-labels", choices=("gold", "random", "both"), default="gold",
                   help="demonstrations show their true answers, random labels (Min et al.), or run both")
    p.add_argument("--cot", action="store_true", help="chain of thought: worked demonstrations, the answer read "
                                                      "from the model's reasoning")
    p.add_argument("--self-consistency", type=int, metavar="K",
                   help="chain of thought with K sampled chains per question, graded by their majority answer")
    p.add_argument("--temperature", type=float, help="sampling temperature of --self-consistency (default 0.7)")
    p.add_argument("--max-new-tokens", type=int, metavar="N",
                   help="longest reply (default 32, or 128 with --cot / --self-consistency)")
    p.add_argument("--json", action="store_true", help="print one JSON object: task, model, mode, per-shots scores")
    p.add_argument("--png", help="write accuracy vs shots as a PNG line chart")
    p.set_defaults(run=run_fewshot)


def run_fewshot(args) -> None:
    from lmlab.eval.fewshot import check_shots, evaluate_cot, evaluate_fewshot
    from lmlab.figures import save_line_plot

    shots = parse_shots(args.shots)
    chains = args.self_consistency
    cot = args.cot or chains is not None
    _check(args, cot)
    if args.png:
        check_file_output(args.png, "--png")
    task = load_task(args.data)
    check_shots(task, shots)
    model, tokenizer = load_decoder(args)
    model.eval()
    max_new_tokens = args.max_new_tokens or (128 if cot else 32)
    if cot:
        runs = [evaluate_cot(model, tokenizer, task, shots, args.seed, args.limit, chains or 1,
                             args.temperature or 0.7, max_new_tokens, show_progress=True)]
    else:
        labels = ("gold", "random") if args.demo_labels == "both" else (args.demo_labels,)
        runs = [evaluate_fewshot(model, tokenizer, task, shots, args.seed, lab, args.limit, max_new_tokens,
                                 show_progress=True) for lab in labels]
    if args.png:
        metric = runs[0].metric
        series = {f"{r.demo_labels} labels" if r.mode == "direct" else r.mode:
                  ([s.shots for s in r.scores], [s.as_dict()[metric] for s in r.scores]) for r in runs}
        save_line_plot(args.png, series, title=f"{task.name}: {metric} vs shots ({args.model})", xlabel="shots",
                       ylabel=metric)
    if args.json:
        print(json.dumps({"task": task.name, "model": args.model, "seed": args.seed, "mode": runs[0].mode,
                          "metric": runs[0].metric, "results": [r.as_dict() for r in runs]}))
        return
    print(_table(task.name, args.model, runs))


def parse_shots(text: str) -> list[int]:
    """--shots "0,1,4,8" as distinct numbers of demonstrations, each 0..MAX_SHOTS."""
    from lmlab.eval.fewshot import MAX_SHOTS

    try:
        shots = [int(part) for part in text.split(",")]
    except ValueError:
        raise LmlabError(f"--shots {text!r} must be comma-separated whole numbers, e.g. 0,1,4,8") from None
    if any(not 0 <= k <= MAX_SHOTS for k in shots):
        raise LmlabError(f"--shots {text} must lie between 0 and {MAX_SHOTS}")
    if len(set(shots)) < len(shots):
        raise LmlabError(f"--shots {text} repeats a number; list each once")
    return shots


def _check(args, cot: bool) -> None:
    from lmlab.generation.config import MIN_TEMPERATURE

    if not 1 <= args.limit <= MAX_LIMIT:
        raise LmlabError(f"--limit {args.limit} must be between 1 and {MAX_LIMIT:,}")
    if args.self_consistency is not None and not 2 <= args.self_consistency <= MAX_SAMPLES:
        raise LmlabError(f"--self-consistency {args.self_consistency} must be between 2 and {MAX_SAMPLES} chains "
                         "(use --cot for one greedy chain)")
    if args.temperature is not None and args.self_consistency is None:
        raise LmlabError("--temperature sets how --self-consistency samples; add --self-consistency K or drop it")
    if args.temperature is not None and not MIN_TEMPERATURE <= args.temperature <= 10:
        raise LmlabError(f"--temperature {args.temperature} must be in [{MIN_TEMPERATURE}, 10]")
    if args.max_new_tokens is not None and not 1 <= args.max_new_tokens <= MAX_NEW_TOKENS:
        raise LmlabError(f"--max-new-tokens {args.max_new_tokens} must be between 1 and {MAX_NEW_TOKENS}")
    if cot and args.demo_labels != "gold":
        raise LmlabError(f"--demo-labels {args.demo_labels} applies to direct prompts (a rationale with a random "
                         "label contradicts itself); drop it or drop --cot / --self-consistency")


def _table(task: str, model: str, runs) -> str:
    """A short table: one row per prompting run and number of shots."""
    multiple_choice = runs[0].metric == "acc"
    header = "shots  labels  mode              " + ("acc     acc_norm" if multiple_choice else "exact_match")
    lines = [f"{task} ({model}), {runs[0].scores[0].examples} questions", header]
    for run in runs:
        for s in run.scores:
            d = s.as_dict()
            value = f"{d['acc']:.3f}   {d['acc_norm']:.3f}" if multiple_choice else f"{d['exact_match']:.3f}"
            lines.append(f"{s.shots:<6} {run.demo_labels:<7} {run.mode:<17} {value}")
    return "\n".join(lines)

"""`lmlab eval harness`: lm-evaluation-harness tasks on an lmlab model, offline, from local task YAMLs
(lm-eval is an optional extra: `pip install 'lmlab[eval]'`)."""

import json
import logging
import os
from pathlib import Path

from lmlab.cli.common.adapter_arg import add_adapter_arg
from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.errors import LmlabError

MAX_LIMIT = 1_000_000
MAX_SHOTS = 100
MAX_BATCH = 1024


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("harness", help="run lm-evaluation-harness tasks (multiple choice, perplexity, "
                                              "generation) on a model, offline")
    p.add_argument("--model", required=True, help="zoo name, model directory or file (a decoder)")
    add_dtype_arg(p)
    add_adapter_arg(p)
    p.add_argument("--tasks", required=True, help="comma-separated lm-eval task names, e.g. lmlab_choices,lmlab_text")
    p.add_argument("--include-path", metavar="DIR",
                   help="read task YAMLs from DIR only (default: lm-eval's built-in tasks, whose data must "
                        "already be in the datasets cache: nothing is downloaded)")
    p.add_argument("--num-fewshot", type=int, metavar="K", help="demonstrations before each question "
                                                                "(default: each task's own)")
    p.add_argument("--limit", type=int, metavar="N", help="examples per task (default: all)")
    p.add_argument("--batch-size", type=int, default=1, help="prompts generated together by generate_until "
                                                             "tasks (default 1; a question's choices are always "
                                                             "scored together)")
    p.add_argument("--trust-task-code", action="store_true",
                   help="run task YAMLs under --include-path that make lm-eval run code (a !function tag in any "
                        "spelling or any tag not YAML's own, an include outside DIR, a metric from the HF evaluate "
                        "library), and render their templates with lm-eval's own jinja2 instead of lmlab's "
                        "sandbox; without it such tasks are refused")
    p.add_argument("--json", action="store_true", help="print one JSON object: task -> metric -> value")
    p.set_defaults(run=run_harness)


def run_harness(args) -> None:
    from lmlab.eval.harness import run_tasks

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise LmlabError(f"--tasks {args.tasks!r} names no task; pass comma-separated task names")
    if args.include_path is not None and not Path(args.include_path).is_dir():
        raise LmlabError(f"--include-path {args.include_path} is not a folder; point it at the folder of the "
                         "task YAMLs")
    if args.num_fewshot is not None and not 0 <= args.num_fewshot <= MAX_SHOTS:
        raise LmlabError(f"--num-fewshot {args.num_fewshot} must be between 0 and {MAX_SHOTS}")
    if args.limit is not None and not 1 <= args.limit <= MAX_LIMIT:
        raise LmlabError(f"--limit {args.limit} must be between 1 and {MAX_LIMIT:,}")
    if not 1 <= args.batch_size <= MAX_BATCH:
        raise LmlabError(f"--batch-size {args.batch_size} must be between 1 and {MAX_BATCH}")
    os.environ["HF_DATASETS_OFFLINE"] = "1"  # read before `datasets` is imported (by lm-eval, on first use)
    os.environ["HF_HUB_OFFLINE"] = "1"
    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # its per-task notes would bury the result
    results = run_tasks(args.model, tasks, args.include_path, args.num_fewshot, args.limit, args.batch_size,
                        show_progress=True, trust_task_code=args.trust_task_code, dtype=args.dtype,
                        adapter=args.adapter, activations=args.activations)
    if args.json:
        print(json.dumps(results))
        return
    print(f"{'task':<24} {'metric':<20} {'value':>12}")
    for task, metrics in results.items():
        for metric, value in metrics.items():
            shown = f"{value:>12d}" if metric == "samples" else f"{value:>12.6g}"
            print(f"{task:<24} {metric:<20} {shown}")

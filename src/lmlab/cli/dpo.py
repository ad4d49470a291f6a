"""`lmlab dpo`: align a model with preference pairs by Direct Preference Optimization."""

import argparse

from lmlab.cli.finetuning import PREFERENCE_FILE, add_finetune_args, recipe_args, report
from lmlab.recipes.dpo import dpo


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "dpo", help="Direct Preference Optimization on preference pairs",
        description="Train a model to prefer the chosen answers over the rejected ones with the DPO loss. The "
                    "reference model is the same network with its adapters off (PEFT) or log-probabilities "
                    "computed once before training (--peft none).",
        epilog="examples:\n"
               "  lmlab dpo --model smollm2-135m-instruct --data task --out runs/dpo --max-steps 40 --lr 1e-3\n"
               "  lmlab dpo --model runs/sft --data prefs.jsonl --out runs/dpo --beta 0.1",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_finetune_args(p, PREFERENCE_FILE)
    p.add_argument("--beta", type=float, default=0.1,
                   help="strength of the pull to the reference model (default 0.1)")
    p.set_defaults(run=run)


def run(args) -> None:
    result = dpo(**recipe_args(args), beta=args.beta)
    report("dpo", args, result, {"val_accuracy": "held-out preference accuracy", "val_margin": "held-out margin",
                                 "task_reward": "task reward", "task_accuracy": "task accuracy"})

"""`lmlab dpo`: align a model with preference pairs by Direct Preference Optimization or one of its
successors (`--loss`)."""

import argparse

from lmlab.cli.common.config_flags import add_config_flags, config_overrides
from lmlab.cli.post_training.common import (
    PREFERENCE_FILE,
    add_json_arg,
    add_post_training_args,
    add_reward_args,
    recipe_args,
    report,
)
from lmlab.training.alignment_configs import DPOConfig


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "dpo", help="Direct Preference Optimization and its successors (IPO, cDPO, robust, SimPO, ORPO) on pairs",
        description="Train a model to prefer the chosen answers over the rejected ones with the DPO loss, or the "
                    "loss --loss names. The reference model is the same network with its adapters off (PEFT) or "
                    "log-probabilities computed once before training (--peft none); --loss simpo and orpo use "
                    "none.",
        epilog="examples:\n"
               "  lmlab dpo --model smollm2-135m-instruct --data task --out runs/dpo --max-steps 40 --lr 1e-3\n"
               "  lmlab dpo --model runs/sft --data prefs.jsonl --out runs/dpo --beta 0.1\n"
               "  lmlab dpo --model runs/sft --data task --loss simpo --beta 2 --simpo-gamma 1 --out runs/simpo\n"
               "  lmlab dpo --model runs/sft --data task --loss robust --label-smoothing 0.1 --out runs/rdpo\n"
               "  lmlab dpo --model runs/sft --data task --sample-pairs 4 --out runs/dpo   # on-policy pairs",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_post_training_args(p, PREFERENCE_FILE)
    add_config_flags(p.add_argument_group("DPO settings (unset ones keep their defaults)"), DPOConfig)
    add_reward_args(p)
    add_json_arg(p)
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.recipes.dpo import dpo

    result = dpo(**recipe_args(args), dpo_cfg=DPOConfig(**config_overrides(args, DPOConfig)), reward_fn=args.reward_fn,
                 reward_model=args.reward_model)
    report("dpo", args, result, {"val_loss": "held-out loss", "val_accuracy": "held-out preference accuracy",
                                 "val_margin": "held-out margin", "task_reward": "task reward",
                                 "task_accuracy": "task accuracy"})

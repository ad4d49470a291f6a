"""`lmlab kto`: align a model with answers labelled good or bad, unpaired, by Kahneman-Tversky Optimization."""

import argparse

from lmlab.cli.common.config_flags import add_config_flags, config_overrides
from lmlab.cli.post_training.common import add_json_arg, add_post_training_args, recipe_args, report
from lmlab.training.alignment_configs import KTOConfig


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "kto", help="Kahneman-Tversky Optimization on answers labelled good or bad, no pairs needed",
        description="Train a model to raise the implicit reward of desirable answers above a reference point and "
                    "push undesirable ones below it (KTO). The reference point estimates KL(policy || reference) "
                    "from each prompt with another example's answer; the reference model is the same network with "
                    "its adapters off (PEFT) or log-probabilities computed once before training (--peft none). "
                    "With unbalanced data, weight the rarer kind up (--desirable-weight, --undesirable-weight).",
        epilog="examples:\n"
               "  lmlab kto --model runs/sft --data task --out runs/kto --max-steps 40 --lr 5e-4\n"
               "  lmlab kto --model runs/sft --data labelled.jsonl --out runs/kto --undesirable-weight 1.3",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_post_training_args(p, "JSONL file of {\"prompt\", \"completion\", \"label\": true or false}")
    add_config_flags(p.add_argument_group("KTO settings (unset ones keep their defaults)"), KTOConfig)
    add_json_arg(p)
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.recipes.kto import kto

    result = kto(**recipe_args(args), kto_cfg=KTOConfig(**config_overrides(args, KTOConfig)))
    report("kto", args, result, {"val_loss": "held-out loss", "val_accuracy": "held-out share on the right side",
                                 "task_reward": "task reward", "task_accuracy": "task accuracy"})

"""`lmlab ppo`: optimise a model for a reward with PPO, held near its starting point by a KL penalty."""

import argparse

from lmlab.cli.common.config_flags import add_config_flags, config_overrides
from lmlab.cli.post_training.common import add_post_training_args, add_reward_args, recipe_args, report
from lmlab.training.alignment_configs import PPOConfig


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "ppo", help="PPO against a reward model or a reward function, with a KL penalty (RLHF)",
        description="Sample replies to the prompts, score them (a reward model from `lmlab reward`, or a Python "
                    "function module:function called with the prompt's messages and the reply), and improve the "
                    "policy with PPO: a value head, GAE, clipped policy and value losses, a per-token KL penalty to "
                    "the starting model (the same network with its adapters off) with a fixed or adaptive "
                    "coefficient, and optionally the pre-training loss mixed in (PPO-ptx, --ptx-coef).",
        epilog="examples:\n"
               "  lmlab ppo --model runs/sft --data task --out runs/ppo --max-steps 48 --batch-size 16 --lr 5e-4\n"
               "  lmlab ppo --model runs/sft --data prompts.jsonl --reward-model runs/rm --out runs/ppo\n"
               "  lmlab ppo --model runs/sft --data prompts.jsonl --reward-fn mygrader:score --ptx-coef 0.1 --out r",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_post_training_args(p, "JSONL file of {\"messages\": [...]} prompts (a trailing assistant reply is dropped)")
    add_reward_args(p)
    add_config_flags(p.add_argument_group("PPO settings (unset ones keep their defaults)"), PPOConfig)
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.recipes.ppo import ppo

    result = ppo(**recipe_args(args), ppo_cfg=PPOConfig(**config_overrides(args, PPOConfig)), reward_fn=args.reward_fn,
                 reward_model=args.reward_model)
    report("ppo", args, result, {"task_reward": "task reward", "task_accuracy": "task accuracy"})

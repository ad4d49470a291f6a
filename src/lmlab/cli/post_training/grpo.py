"""`lmlab grpo`: optimise a model for verifiable rewards or a reward model with GRPO: K replies per prompt,
each judged against the others, no value head."""

import argparse
import math

from lmlab.cli.common.config_flags import add_config_flags, config_overrides
from lmlab.cli.post_training.common import add_json_arg, add_post_training_args, add_reward_args, recipe_args, report
from lmlab.errors import LmlabError
from lmlab.training.alignment_configs import SOURCES, GRPOConfig


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "grpo", help="GRPO: K replies per prompt judged against each other, for verifiable rewards or a reward model",
        description="Sample K replies (--replies-per-prompt) to each prompt, score each with the sum of the rewards "
                    "named (the addition task's own, --reward-regex, --reward-fn, --reward-model; weights by "
                    "--reward-weight), take each reply's reward against its group's mean (divided by the group's "
                    "std, or not: --no-scale-rewards, Dr. GRPO) as the advantage of all its tokens, and minimise "
                    "the clipped ratio loss plus beta (--kl-coef) times the k3 KL to the starting model (the same "
                    "network with its adapters off). No value head. --reward-fn FILE.py:FUNCTION RUNS THAT FILE: "
                    "name only your own code.",
        epilog="examples:\n"
               "  lmlab grpo --model runs/sft --data task --out runs/grpo --max-steps 48 --batch-size 4 --lr 5e-4\n"
               "  lmlab grpo --model runs/sft --data prompts.jsonl --reward-regex '<answer>.*</answer>' --out r\n"
               "  lmlab grpo --model runs/sft --data task --task-reward --reward-fn grader.py:score "
               "--reward-weight fn=0.5 --out r\n"
               "  lmlab grpo --model runs/sft --data prompts.jsonl --reward-model runs/rm --out runs/grpo",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_post_training_args(p, "JSONL file of {\"messages\": [...]} prompts (a trailing assistant reply is dropped)")
    add_reward_args(p)
    p.add_argument("--reward-regex", metavar="PATTERN",
                   help="reward 1 when the whole reply (stripped) matches this Python regular expression, else 0")
    p.add_argument("--task-reward", action=argparse.BooleanOptionalAction, default=None,
                   help="add the addition task's reward (--data task; the default there when no other is named)")
    p.add_argument("--reward-weight", action="append", default=[], metavar="NAME=W",
                   help=f"weight of one reward in the sum, NAME one of {', '.join(SOURCES)} (default 1 each; "
                        "repeat the flag for several)")
    add_json_arg(p)
    add_config_flags(p.add_argument_group("GRPO settings (unset ones keep their defaults)"), GRPOConfig)
    p.set_defaults(run=run)


def reward_weights(given: list[str]) -> dict[str, float]:
    """NAME=W flags -> {name: w}."""
    weights = {}
    for item in given:
        name, _, value = item.partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = math.nan
        if name not in SOURCES or not math.isfinite(weight):
            raise LmlabError(f"--reward-weight {item!r} must be NAME=W with NAME one of {', '.join(SOURCES)} and W "
                             "a number, e.g. --reward-weight regex=0.5")
        weights[name] = weight
    return weights


def run(args) -> None:
    from lmlab.recipes.grpo import grpo

    result = grpo(**recipe_args(args), grpo_cfg=GRPOConfig(**config_overrides(args, GRPOConfig)),
                  reward_fn=args.reward_fn, reward_model=args.reward_model, reward_regex=args.reward_regex,
                  task_reward=args.task_reward, reward_weights=reward_weights(args.reward_weight))
    report("grpo", args, result, {"task_reward": "task reward", "task_accuracy": "task accuracy"})

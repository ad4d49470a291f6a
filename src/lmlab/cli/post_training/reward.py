"""`lmlab reward`: train a reward model (backbone + scalar head) on preference pairs or rankings."""

import argparse

from lmlab.cli.common.vocabulary import alias
from lmlab.cli.post_training.common import PREFERENCE_FILE, add_post_training_args, recipe_args, report


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "reward", help="train a reward model on preferences (Bradley-Terry)",
        description="Train a reward model: the model's backbone plus a scalar head read at the last token, fitted "
                    "to preferences with the Bradley-Terry loss over every (better, worse) pair of a prompt's "
                    "ranked answers. Reports the held-out pairwise accuracy before and after.",
        epilog="examples:\n"
               "  lmlab reward --model smollm2-135m-instruct --data task --out runs/rm --max-steps 40\n"
               "  lmlab reward --model runs/sft --data prefs.jsonl --out runs/rm --peft none --lr 1e-5",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_post_training_args(p, PREFERENCE_FILE)
    alias(p, "--ranked", "--k", dest="ranked", type=int, default=4,
          help="--data task: answers ranked per question, 2 to 5 (default 4)")
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.models.tuned_files import REWARD_HEAD_FILE
    from lmlab.recipes.reward import reward

    result = reward(**recipe_args(args), k=args.ranked)
    report("reward", args, result, {"val_accuracy": "held-out pairwise accuracy", "val_loss": "held-out loss"})
    if result.finished:
        print(f"reward model saved to {args.out} ({REWARD_HEAD_FILE} + its backbone); "
              "load it with lmlab.models.tuned_files.load_reward_model")

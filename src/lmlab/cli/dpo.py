"""`lmlab dpo`: align a model with preference pairs by Direct Preference Optimization."""

import argparse

from lmlab.cli.finetuning import PREFERENCE_FILE, add_finetune_args, add_reward_args, recipe_args, report
from lmlab.recipes.dpo import dpo


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "dpo", help="Direct Preference Optimization on preference pairs",
        description="Train a model to prefer the chosen answers over the rejected ones with the DPO loss. The "
                    "reference model is the same network with its adapters off (PEFT) or log-probabilities "
                    "computed once before training (--peft none).",
        epilog="examples:\n"
               "  lmlab dpo --model smollm2-135m-instruct --data task --out runs/dpo --max-steps 40 --lr 1e-3\n"
               "  lmlab dpo --model runs/sft --data prefs.jsonl --out runs/dpo --beta 0.1\n"
               "  lmlab dpo --model runs/sft --data task --sample-pairs 4 --out runs/dpo   # on-policy pairs",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_finetune_args(p, PREFERENCE_FILE)
    p.add_argument("--beta", type=float, default=0.1,
                   help="strength of the pull to the reference model (default 0.1)")
    p.add_argument("--sample-pairs", type=int, default=0, metavar="K",
                   help="make the pairs from K replies the model samples per prompt (--data is then prompts, as "
                        "for ppo): the best and the worst by the reward below, when they differ")
    p.add_argument("--sample-max-new-tokens", type=int, default=32, metavar="N",
                   help="--sample-pairs: the longest reply sampled, in tokens (default 32)")
    p.add_argument("--sample-temperature", type=float, default=1.0, metavar="T",
                   help="--sample-pairs: sampling temperature (default 1; lower gives pairs nearer the greedy replies)")
    p.add_argument("--sample-with-reference", action="store_true",
                   help="--sample-pairs: the data's own reply (the task's right answer, a JSONL example's assistant "
                        "message) joins the sampled candidates, so a question the model gets wrong pairs the right "
                        "reply with the model's own mistake")
    add_reward_args(p)
    p.set_defaults(run=run)


def run(args) -> None:
    result = dpo(**recipe_args(args), beta=args.beta, sample_pairs=args.sample_pairs,
                 sample_max_new_tokens=args.sample_max_new_tokens, sample_temperature=args.sample_temperature,
                 sample_with_reference=args.sample_with_reference, reward_fn=args.reward_fn,
                 reward_model=args.reward_model)
    report("dpo", args, result, {"val_accuracy": "held-out preference accuracy", "val_margin": "held-out margin",
                                 "task_reward": "task reward", "task_accuracy": "task accuracy"})

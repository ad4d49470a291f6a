"""`lmlab sft`: supervised fine-tuning (instruction tuning) on chats, with PEFT or in full."""

import argparse

from lmlab.cli.post_training.common import add_post_training_args, recipe_args, report


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sft", help="supervised fine-tuning on chats (instruction tuning)",
        description="Fine-tune a model on chats in its chat template, with the loss on the assistant's tokens only. "
                    "Saves the adapter (and for LoRA the merged model, so `lmlab generate --model OUT` works) or, "
                    "with --peft none, the whole model.",
        epilog="examples:\n"
               "  lmlab sft --model smollm2-135m-instruct --data task --out runs/sft --max-steps 60 --lr 2e-3\n"
               "  lmlab sft --model smollm2-135m-instruct --data chats.jsonl --out runs/sft --peft adapter\n"
               "  lmlab sft --model smollm2-135m-instruct --data task --out runs/sft --resume",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_post_training_args(p, "JSONL file of {\"messages\": [{\"role\": …, \"content\": …}, …]}")
    p.add_argument("--pack", action="store_true", help="put several whole chats in one row of block_size tokens")
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.recipes.sft import sft

    result = sft(**recipe_args(args), pack=args.pack)
    report("sft", args, result, {"val_loss": "held-out loss per reply token", "task_reward": "task reward",
                                 "task_accuracy": "task accuracy"})

"""What the post-training commands (sft, reward, dpo, ppo, grpo) share: their flags, and how a run is reported."""

import argparse
import dataclasses
import json

from lmlab.cli.common.config_flags import add_config_flags, config_overrides
from lmlab.training.post_train_config import TASK, PostTrainConfig, PostTrainResult

PREFERENCE_FILE = "JSONL file of {\"prompt\", \"chosen\", \"rejected\"} or {\"prompt\", \"ranked\": [best, …]}"


def add_post_training_args(p: argparse.ArgumentParser, data_help: str) -> None:
    """--model, --data, --out, --adapter, --resume, --stop-after, --device, and one flag per
    `PostTrainConfig` field (--peft, --lora-rank, --max-steps, --lr, …)."""
    p.add_argument("--model", required=True,
                   help="the model to start from: zoo name, model directory, lmlab run directory or .gguf file")
    p.add_argument("--data", required=True, help=f"{data_help}, or '{TASK}' for the embedded addition task")
    p.add_argument("--out", required=True, help="run directory (checkpoints, metrics, loss.png, the result)")
    p.add_argument("--adapter", help="continue training this saved adapter directory (its PEFT method and "
                                     "settings replace --peft's)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--stop-after", type=int, help="stop (with a checkpoint) after this many steps this session")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 …")
    group = p.add_argument_group("post-training settings (unset ones keep their defaults)")
    add_config_flags(group, PostTrainConfig, skip={"lora_targets"})
    group.add_argument("--lora-targets", nargs="+", metavar="NAME",
                       help="linear layers LoRA adapts, by (trailing) dotted name with * wildcards "
                            "(default: qkv out)")


def add_reward_args(p: argparse.ArgumentParser) -> None:
    """--reward-fn and --reward-model: what grades sampled replies (PPO, GRPO; DPO with --sample-pairs)."""
    p.add_argument("--reward-fn", metavar="MODULE:FUNCTION",
                   help="reward function (prompt messages, reply text) -> float, as module:function or "
                        "file.py:function (RUNS that file: name only your own code); on --data task the task's own "
                        "reward is the default")
    p.add_argument("--reward-model", metavar="DIR", help="the --out directory of a finished `lmlab reward` run")


def post_train_config(args: argparse.Namespace) -> PostTrainConfig:
    return PostTrainConfig(**config_overrides(args, PostTrainConfig))


def recipe_args(args: argparse.Namespace) -> dict:
    """The keyword arguments every recipe takes from the shared flags."""
    return {"model": args.model, "data": args.data, "out": args.out, "cfg": post_train_config(args),
            "adapter": args.adapter, "resume": args.resume, "stop_after": args.stop_after, "device": args.device}


def add_json_arg(p: argparse.ArgumentParser) -> None:
    """`--json`: `report` prints the result as one JSON object instead of lines."""
    p.add_argument("--json", action="store_true", help="print one JSON object: step, finished, before, after, "
                                                       "model_dir, adapter_dir, trainable")


def report(command: str, args: argparse.Namespace, result: PostTrainResult, labels: dict[str, str]) -> None:
    """Print how the run ended: the held-out measures before -> after (`labels`: metric -> name)
    and where the result is, or how to continue a stopped run; with `--json`, the result as one object."""
    if getattr(args, "json", False):
        print(json.dumps({key: str(value) if value is not None and key.endswith("_dir") else value
                          for key, value in dataclasses.asdict(result).items()}))
        return
    print(result.trainable)
    if not result.finished:
        print(f"stopped at step {result.step}; a checkpoint is in {args.out}/checkpoints. "
              f"Continue with: lmlab {command} … --out {args.out} --resume")
        return
    print(f"done: {result.step} steps")
    for key, label in labels.items():
        if key in result.after:
            before = f"{result.before[key]:.3f} -> " if key in result.before else ""
            print(f"  {label}: {before}{result.after[key]:.3f}")
    if result.model_dir is not None:
        print(f"model saved to {result.model_dir} (try: lmlab generate --model {args.out} --prompt …)")
    if result.adapter_dir is not None:
        print(f"adapter saved to {result.adapter_dir} (its base model is named in {args.out}/run.json)")

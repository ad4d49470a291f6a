"""The settings every post-training run shares (`PostTrainConfig`), apart from the model, the data and the
output directory, and what a run gives back (`PostTrainResult`): torch-free, so that the CLI's parsers (one
flag per field) load at once. What the recipes do with them is `training/post_training.py`."""

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lmlab.config import LoopConfig, OptimConfig
from lmlab.config_checks import MAX_CONTEXT, MAX_WIDTH, at_least, at_most, check_types, fraction, positive
from lmlab.errors import LmlabError

TASK = "task"  # --data value for the embedded addition task (lmlab.data.tasks)


@dataclass(frozen=True)
class PostTrainConfig:
    """Everything about a post-training run except the model, the data and the output directory."""

    peft: Literal["lora", "adapter", "prefix", "prompt", "none"] = "lora"  # none = train every weight
    lora_rank: int = 8  # LoRA: rank r of the low-rank update BA
    lora_alpha: float = 16.0  # LoRA: the update is scaled by alpha / r
    lora_dropout: float = 0.0  # LoRA: dropout on the adapter's input
    lora_targets: tuple[str, ...] = ("qkv", "out")  # linear layers by (trailing) dotted name, * wildcards
    adapter_bottleneck: int = 64  # adapters: width of the bottleneck
    n_prefix: int = 16  # prefix tuning: trained key/value positions per layer
    n_prompt_tokens: int = 20  # prompt tuning: trained virtual tokens
    # a ranking or a pair counts as one example of the batch
    loop: LoopConfig = LoopConfig(max_steps=100, batch_size=8, eval_every=50, checkpoint_every=50, keep_checkpoints=2,
                                  log_every=1)
    block_size: int = 512  # tokens per sequence at most; a batch is only as long as its longest one
    chat_template: str | None = dataclasses.field(default=None, metadata={"help": (
        "NAME: render chats with the model's chat template of this name (models may ship several, e.g. "
        "tool_use); default: the one named 'default'")})
    # lr 2e-4 suits LoRA and adapters; full fine-tuning (peft none) wants ~1e-5
    optim: OptimConfig = OptimConfig(lr=2e-4, warmup_steps=10, weight_decay=0.0)
    val_fraction: float = 0.1  # share of the examples held out for evaluation
    task_size: int = 1000  # --data task: examples drawn (repeated questions are dropped)
    task_max_operand: int = 99  # --data task: operands 0..N; 99 suits a pre-trained model
    task_eval_size: int = 64  # --data task: held-out questions answered greedily before and after
    max_memory: str | None = dataclasses.field(default=None, metadata={"help": (
        "SIZE: refuse to start when the estimated memory per process exceeds it (8GiB, 512MiB)")})

    def __post_init__(self):
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))  # a list would not compare equal
        check_types(self)
        at_least(self, 1, "lora_rank", "adapter_bottleneck", "n_prefix", "n_prompt_tokens", "block_size", "task_size",
                 "task_eval_size")
        at_least(self, 0, "task_max_operand")
        at_most(self, MAX_CONTEXT, "block_size", "n_prefix", "n_prompt_tokens")
        at_most(self, MAX_WIDTH, "lora_rank", "adapter_bottleneck")
        positive(self, "lora_alpha")
        fraction(self, "lora_dropout")
        fraction(self, "val_fraction")
        if self.loop.fsdp and self.peft != "none":
            raise LmlabError(f"--fsdp shards a model whose every weight trains; with --peft {self.peft} only a "
                             "small adapter trains, which data parallelism (torchrun without --fsdp) handles: drop "
                             "--fsdp, or pass --peft none")

    def replace(self, **changes) -> "PostTrainConfig":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class PostTrainResult:
    """How a post-training session ended, and what it saved."""

    step: int
    finished: bool  # False when it stopped early (stop_after, Ctrl-C): resume to finish
    model_dir: Path | None  # a full model directory: peft none, or LoRA merged
    adapter_dir: Path | None  # the trained PEFT parameters; run.json names their base model
    before: dict  # held-out metrics before training (val_*, task_*)
    after: dict  # held-out metrics at the last step
    trainable: str  # "trainable 0.6M of 135.2M (0.48%)"

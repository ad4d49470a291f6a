"""The settings of each preference-tuning recipe (DPO, KTO, PPO, GRPO) beside `PostTrainConfig`, which they
share: torch-free, so that the CLI's parsers (one flag per field) load at once."""

import dataclasses
from dataclasses import dataclass
from typing import Literal

from lmlab.config_checks import (
    MAX_BATCH,
    MAX_CONTEXT,
    MIN_TEMPERATURE,
    at_least,
    at_most,
    check_types,
    fraction,
    positive,
)
from lmlab.errors import LmlabError
from lmlab.losses.preference_kinds import LABEL_SMOOTHED, PreferenceLoss

SOURCES = ("task", "regex", "fn", "model")  # what GRPO's reward may sum (`training/reward_mix.py`)


@dataclass(frozen=True)
class DPOConfig:
    """DPO's own settings (the rest, batch size included, is `PostTrainConfig`)."""

    loss: PreferenceLoss = dataclasses.field(default="dpo", metadata={"help": (
        "dpo (sigmoid), cdpo (labels flipped with probability --label-smoothing), robust (unbiased under such "
        "flips), ipo (squared, per-token margin), simpo (per-token, no reference, margin --simpo-gamma), orpo "
        "(odds ratio plus the SFT loss, no reference)")})
    beta: float = 0.1  # strength of the pull to the reference model (simpo: the reward scale, ~2; orpo: the weight)
    label_smoothing: float = 0.0  # cdpo, robust, simpo: the probability e that a pair's label is wrong, below 0.5
    simpo_gamma: float = 0.5  # simpo: the target margin of mean log-probs per token, times beta
    sample_pairs: int = dataclasses.field(default=0, metadata={"help": (
        "K: make the pairs from K replies the model samples per prompt (--data is then prompts, as for ppo): the "
        "best and the worst by the reward (--reward-fn, --reward-model), when they differ")})
    sample_max_new_tokens: int = 32  # --sample-pairs: the longest reply sampled, in tokens
    sample_temperature: float = 1.0  # --sample-pairs: sampling temperature; lower gives pairs nearer the greedy replies
    sample_with_reference: bool = dataclasses.field(default=False, metadata={"help": (
        "--sample-pairs: the data's own reply (the task's right answer, a JSONL example's assistant message) joins "
        "the sampled candidates, so a question the model gets wrong pairs the right reply with the model's own "
        "mistake")})

    def __post_init__(self):
        check_types(self)
        if not self.beta > 0:
            raise LmlabError(f"--beta {self.beta} must be positive (0.1 is usual; larger keeps closer to the "
                             "reference)")
        if not 0 <= self.label_smoothing < 0.5:
            raise LmlabError(f"--label-smoothing {self.label_smoothing} must be in [0, 0.5): the probability that "
                             "a pair's label is wrong (0.1 is usual)")
        if self.label_smoothing and self.loss not in LABEL_SMOOTHED:
            raise LmlabError(f"--label-smoothing applies to --loss {', '.join(LABEL_SMOOTHED)}, not {self.loss}; "
                             "drop it or pick one of those")
        at_least(self, 0, "sample_pairs", "sample_temperature")
        at_least(self, 1, "sample_max_new_tokens")
        at_most(self, MAX_BATCH, "sample_pairs")
        at_most(self, MAX_CONTEXT, "sample_max_new_tokens")


@dataclass(frozen=True)
class KTOConfig:
    """KTO's own settings (the rest, batch size included, is `PostTrainConfig`)."""

    beta: float = 0.1  # strength of the pull to the reference model
    desirable_weight: float = 1.0  # weight of a desirable answer's loss
    undesirable_weight: float = 1.0  # weight of an undesirable answer's loss (raise the rarer kind's weight)

    def __post_init__(self):
        check_types(self)
        positive(self, "desirable_weight", "undesirable_weight")
        if not self.beta > 0:
            raise LmlabError(f"--beta {self.beta} must be positive (0.1 is usual; larger keeps closer to the "
                             "reference)")


@dataclass(frozen=True)
class PPOConfig:
    """PPO's own settings (the rest, batch size included, is `PostTrainConfig`)."""

    ppo_epochs: int = 4  # optimizer steps on each rollout
    clip: float = 0.2  # policy ratio clip
    value_clip: float = 0.2  # how far one step may move a value
    vf_coef: float = 0.1  # weight of the value loss
    kl_coef: float = 0.05  # beta at the start
    adaptive_kl: bool = True  # adapt beta to hold the KL near kl_target; else beta stays kl_coef
    kl_target: float = 1.0  # KL to the reference per reply (nats) that the adaptive beta aims at
    kl_horizon: int = 200  # replies over which the adaptive beta may change by ~20%
    gamma: float = 1.0  # discount of future rewards in the advantages
    lam: float = 0.95  # GAE's lambda: bias (0) against variance (1) of the advantages
    temperature: float = 1.0  # sampling temperature of the rollouts; the policy trained is softmax(logits / T)
    max_new_tokens: int = 24  # reply length cap
    ptx_coef: float = 0.0  # PPO-ptx: weight of the pre-training LM loss (0: off)
    ptx_data: str = "stdlib"  # pre-training text for PPO-ptx: an embedded corpus or a path
    ptx_block_size: int = 128  # tokens per pre-training block mixed into the PPO loss (ptx)
    ptx_batch_size: int = 2  # pre-training blocks per step of the ptx loss

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "ppo_epochs", "max_new_tokens", "kl_horizon", "ptx_block_size", "ptx_batch_size")
        at_most(self, MAX_CONTEXT, "max_new_tokens", "ptx_block_size")
        at_most(self, MAX_BATCH, "ptx_batch_size")
        positive(self, "clip", "value_clip", "kl_target")
        at_least(self, MIN_TEMPERATURE, "temperature")  # the rollouts sample: 0 (greedy) is no policy to improve
        at_least(self, 0, "kl_coef", "vf_coef", "ptx_coef")
        fraction(self, "gamma", upper_included=True)
        fraction(self, "lam", upper_included=True)


@dataclass(frozen=True)
class GRPOConfig:
    """GRPO's own settings (the rest is `PostTrainConfig`, whose batch size counts prompts: a step samples
    batch_size x replies_per_prompt replies)."""

    replies_per_prompt: int = 4  # K: replies sampled per prompt, judged against each other
    iterations: int = 1  # optimizer steps on each rollout (TRL's num_iterations); at 1 the ratio is 1: no clipping
    clip: float = 0.2  # policy ratio clip (epsilon)
    kl_coef: float = 0.04  # beta on the k3 KL to the reference in the loss (DeepSeekMath's); 0: no reference is run
    scale_rewards: bool = True  # divide by the group's std; off: Dr. GRPO's r - mean
    average: Literal["sequence", "token"] = "sequence"  # loss mean per reply then over replies, or over all tokens
    temperature: float = 1.0  # sampling temperature; the policy trained is softmax(logits / T)
    max_new_tokens: int = 24  # reply length cap

    def __post_init__(self):
        check_types(self)
        at_least(self, 2, "replies_per_prompt")  # one reply is its own baseline: its advantage is always 0
        at_least(self, 1, "iterations", "max_new_tokens")
        at_most(self, MAX_BATCH, "replies_per_prompt")
        at_most(self, MAX_CONTEXT, "max_new_tokens")
        positive(self, "clip")
        at_least(self, 0, "kl_coef")
        at_least(self, MIN_TEMPERATURE, "temperature")  # the rollouts sample: 0 (greedy) gives K equal replies

"""GRPO's reward: verifiable rewards and a reward model, summed with weights.

Each reply gets sum_s w_s r_s over the sources in use (`training.rewards` makes each source):

    task   the embedded addition task's programmatic reward (`data.tasks.reward`; right number, form, length)
    regex  1 when the whole reply (stripped) matches a regular expression, else 0: a format reward
    fn     a Python function (prompt messages, reply text) -> float, "module:function" or "file.py:function"
    model  the score of a reward model trained by `lmlab reward`

On `--data task` with no other source named, the task's reward is the one used. Replies are at most
`max_new_tokens` tokens, which bounds the time a regex takes on one.
"""

import math
import numbers
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from lmlab.data.tasks import reward as task_reward
from lmlab.errors import LmlabError
from lmlab.training.post_train_config import TASK
from lmlab.training.rewards import RewardFn, import_function, model_reward


@dataclass(frozen=True)
class RewardMix:
    """The sources of a run's reward, by name (`alignment_configs.SOURCES`), with their weights."""

    functions: dict[str, RewardFn]
    weights: dict[str, float]
    describe: dict[str, str]  # name -> what it is (for errors): the regex, the function, the directory


def reward_mix(data: str, block_size: int, reward_fn: str | None = None, reward_model: str | Path | None = None,
               reward_regex: str | None = None, task_reward_on: bool | None = None,
               weights: dict[str, float] | None = None) -> RewardMix:
    """The rewards named (see the module docstring); `task_reward_on` None means: on the task, when
    nothing else is named. `weights` (name -> w, default 1 each) may name only sources in use."""
    named = {"regex": reward_regex, "fn": reward_fn, "model": str(reward_model) if reward_model else None}
    describe = {name: value for name, value in named.items() if value}
    if task_reward_on is None:
        task_reward_on = data == TASK and not describe
    if task_reward_on:
        if data != TASK:
            raise LmlabError("--task-reward grades the embedded addition task; use it with --data task")
        describe = {"task": "the addition task's reward"} | describe
    if not describe:
        raise LmlabError("this needs a reward for the replies: pass --reward-regex, --reward-fn, --reward-model "
                         "(or on --data task, --task-reward)")
    weights = dict(weights or {})
    unused = sorted(set(weights) - set(describe))
    if unused:
        raise LmlabError(f"--reward-weight {unused[0]}=... weighs a reward not in use; the rewards in use are "
                         f"{', '.join(describe)}")
    functions = {"task": lambda: task_reward, "regex": lambda: regex_reward(reward_regex),
                 "fn": lambda: checked(import_function(reward_fn), reward_fn),
                 "model": lambda: model_reward(reward_model, block_size)}
    return RewardMix({name: functions[name]() for name in describe},
                     {name: weights.get(name, 1.0) for name in describe}, describe)


def regex_reward(pattern: str) -> RewardFn:
    """1.0 when the whole reply, stripped of surrounding whitespace, matches `pattern` (with re.DOTALL:
    `.` matches newlines too), else 0.0."""
    try:
        compiled = re.compile(pattern, re.DOTALL)
    except re.error as e:
        raise LmlabError(f"--reward-regex {pattern!r} is not a regular expression ({e}); fix the pattern") from None
    return lambda prompt, reply: float(compiled.fullmatch(reply.strip()) is not None)


def checked(function: RewardFn, spec: str) -> RewardFn:
    """`function`, with its errors and a result that is not a finite number turned into one line."""
    def reward(prompt: list[dict], reply: str) -> float:
        try:
            value = function(prompt, reply)
        except Exception as e:  # the user's code: its error is theirs to fix, said in one line
            raise LmlabError(f"reward function {spec} raised {type(e).__name__}: {e}") from None
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise LmlabError(f"reward function {spec} returned {value!r} for reply {reply[:40]!r}; it must "
                             "return a finite number")
        return float(value)
    return reward


def score_replies(mix: RewardMix, prompts: list[list[dict]], replies: list[str]) -> tuple[torch.Tensor, dict]:
    """The weighted sum of the rewards of each reply to its prompt, (B,), and the mean of each source
    ("reward_task", "reward_regex", ...) to log."""
    by_source = {name: [function(prompt, reply) for prompt, reply in zip(prompts, replies)]
                 for name, function in mix.functions.items()}
    total = torch.tensor([sum(mix.weights[name] * by_source[name][i] for name in by_source)
                          for i in range(len(replies))], dtype=torch.float32)
    return total, {f"reward_{name}": sum(values) / len(values) for name, values in by_source.items()}


"""Where the reward of a reply comes from, for the recipes that sample replies (PPO, DPO on sampled pairs;
the pairs themselves are made in `training.preference_data.sampled_pairs`).

A reward is a function (prompt messages, reply text) -> float: a Python function named on the
command line as "module:function" or "file.py:function" (the file is run: the user's own code), the
score of a reward model trained by `lmlab reward`, or, on the embedded task, the task's programmatic
reward. The prompts it judges are chats without the reply: the task's questions or a JSONL file's
`messages`. GRPO sums several of them with weights (`training.reward_mix`).
"""

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path

import torch

from lmlab.data.chat_jsonl import read_chat_jsonl
from lmlab.data.tasks import perfect_reply, task_prompts
from lmlab.data.tasks import reward as task_reward
from lmlab.errors import LmlabError
from lmlab.models.tuned_files import load_reward_model
from lmlab.objectives.sft import ROLES
from lmlab.training.post_train_config import TASK
from lmlab.training.post_training import PostTrainConfig, unique, with_reply
from lmlab.training.reward_model import chat_rewards

RewardFn = Callable[[list[dict], str], float]  # (prompt messages, reply text) -> reward


def load_prompts(data: str, cfg: PostTrainConfig) -> list[list[dict]]:
    """Chat prompts to reply to: the task's questions (each once), or a JSONL file's `messages`
    (a trailing assistant reply, if any, is dropped: the policy writes its own)."""
    return [prompt for prompt, _ in prompts_and_replies(data, cfg)]


def prompts_and_replies(data: str, cfg: PostTrainConfig) -> list[tuple[list[dict], str | None]]:
    """`load_prompts`, each with the reply the data gives for it: the task's perfect answer, a JSONL
    example's trailing assistant message, or None when the example ends with the question."""
    if data == TASK:
        return [(prompt, perfect_reply(prompt)) for prompt in unique(task_prompts(cfg.task_size, cfg.loop.seed,
                                                                                  cfg.task_max_operand))]
    rows = []
    for index, messages in enumerate(read_chat_jsonl(data)):
        reply = None
        if messages[-1]["role"] == "assistant":
            messages, reply = messages[:-1], messages[-1]["content"]
        bad = next((m["role"] for m in messages if m["role"] not in ROLES), None)
        if not messages or bad is not None:
            raise LmlabError(f"{data}: example {index + 1} " + (f"has role {bad!r}; use one of {', '.join(ROLES)}"
                             if bad else "has no message to reply to; give it a user message"))
        rows.append((messages, reply))
    return rows


def reward_source(data: str, reward_fn: str | None, reward_model: str | Path | None, block_size: int) -> RewardFn:
    """The reward of a reply: a Python function named "module:function", a reward model's score, or
    (on the task, when neither is given) the task's programmatic reward."""
    if reward_fn and reward_model:
        raise LmlabError("pass --reward-fn or --reward-model, not both")
    if reward_fn:
        return import_function(reward_fn)
    if reward_model:
        return model_reward(reward_model, block_size)
    if data == TASK:
        return task_reward
    raise LmlabError("this needs a reward for the replies: pass --reward-model (a `lmlab reward` run directory) "
                     "or --reward-fn module:function")


def model_reward(reward_model: str | Path, block_size: int) -> RewardFn:
    """The score the reward model of a `lmlab reward` run directory gives a reply."""
    rm, rm_tokenizer = load_reward_model(reward_model)

    @torch.no_grad()
    def model_score(prompt: list[dict], reply: str) -> float:
        return chat_rewards(rm, rm_tokenizer, [with_reply(prompt, reply)], block_size).item()
    return model_score


def import_function(spec: str) -> RewardFn:
    """The function `spec` names: "package.module:function", or "path/to/file.py:function", a file of
    the user's that is run (imported) to find it: their own code, run with their rights."""
    module_name, _, name = spec.rpartition(":")
    if not module_name or not name:
        raise LmlabError(f"reward function {spec!r} must be written module:function or file.py:function, "
                         "e.g. lmlab.data.tasks:reward")
    try:
        module = file_module(Path(module_name)) if module_name.endswith(".py") else importlib.import_module(
            module_name)
        function = getattr(module, name)
    except (ImportError, AttributeError) as e:
        raise LmlabError(f"cannot load reward function {spec!r} ({e}); check the module is importable "
                         "(on PYTHONPATH) or the file exists, and that it defines that function") from None
    if not callable(function):
        raise LmlabError(f"{spec!r} is not a function; name a callable (prompt messages, reply) -> float")
    return function


def file_module(path: Path):
    """The module a Python file defines, by running it (ImportError when there is no such file, or
    running it fails: the error's one line says why)."""
    if not path.is_file():
        raise ImportError(f"no file {path}")
    spec = importlib.util.spec_from_file_location(f"lmlab_user_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's code: any error it raises is theirs to fix, said in one line
        raise ImportError(f"running {path} raised {type(e).__name__}: {e}") from None
    return module

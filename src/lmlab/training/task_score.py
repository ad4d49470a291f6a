"""How well a model does the embedded addition task (`lmlab.data.tasks`): greedy replies, graded.

Recipes measure it on held-out questions before and after training, so a run on `--data task`
shows what it changed in the replies themselves, not only in the loss.
"""

import torch

from lmlab.data.tasks import TaskScore, score
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.tokenizers.chat import chat_prompt
from lmlab.tokenizers.text import TextTokenizer


def greedy_replies(model: torch.nn.Module, tokenizer: TextTokenizer, prompts: list[list[dict]],
                   max_new_tokens: int = 16, batch_size: int = 16) -> list[str]:
    """The model's greedy reply to each chat prompt (rendered with its chat template), in batches;
    a reply ends at the tokenizer's stop tokens (end of turn) or after `max_new_tokens`."""
    ids = [tokenizer.encode(chat_prompt(tokenizer, prompt)) for prompt in prompts]
    config = GenerationConfig(max_new_tokens=max_new_tokens, eos_id=tokenizer.stop_ids)
    replies = []
    for start in range(0, len(ids), batch_size):
        replies += [g.text for g in generate_batch(model, ids[start:start + batch_size], config, tokenizer)]
    return replies


def task_score(model: torch.nn.Module, tokenizer: TextTokenizer, prompts: list[list[dict]]) -> dict:
    """{"task_reward", "task_accuracy"}: the mean reward and the share of right answers of the
    model's greedy replies to the task `prompts` (call it in eval mode, without gradients)."""
    result: TaskScore = score(lambda batch: greedy_replies(model, tokenizer, batch), prompts)
    return {"task_reward": result.reward, "task_accuracy": result.accuracy}

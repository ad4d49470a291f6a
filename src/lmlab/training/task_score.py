"""How well a model does the embedded addition task (`lmlab.data.tasks`): greedy replies, graded.

Recipes measure it on held-out questions before and after training, so a run on `--data task`
shows what it changed in the replies themselves, not only in the loss.
"""

import torch

from lmlab.data.tasks import TaskScore, score
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.losses.cross_entropy import token_logprobs
from lmlab.objectives.sft import response_batch
from lmlab.progress import in_batches
from lmlab.tokenizers.chat import chat_prompt
from lmlab.tokenizers.text import TextTokenizer


def greedy_replies(model: torch.nn.Module, tokenizer: TextTokenizer, prompts: list[list[dict]],
                   max_new_tokens: int = 16, batch_size: int = 16) -> list[str]:
    """The model's greedy reply to each chat prompt (rendered with its chat template), in batches;
    a reply ends at the tokenizer's stop tokens (end of turn) or after `max_new_tokens`."""
    ids = [tokenizer.encode(chat_prompt(tokenizer, prompt)) for prompt in prompts]
    config = GenerationConfig(max_new_tokens=max_new_tokens, eos_id=tokenizer.stop_ids)
    replies = []
    for batch in in_batches(ids, batch_size, "task replies", "question"):
        replies += [g.text for g in generate_batch(model, batch, config, tokenizer)]
    return replies


def task_score(model: torch.nn.Module, tokenizer: TextTokenizer, prompts: list[list[dict]]) -> dict:
    """{"task_reward", "task_accuracy"}: the mean reward and the share of right answers of the
    model's greedy replies to the task `prompts` (call it in eval mode, without gradients)."""
    result: TaskScore = score(lambda batch: greedy_replies(model, tokenizer, batch), prompts)
    return {"task_reward": result.reward, "task_accuracy": result.accuracy}


@torch.no_grad()
def kl_to_reference(model: torch.nn.Module, reference: torch.nn.Module, tokenizer: TextTokenizer,
                    prompts: list[list[dict]], max_new_tokens: int = 16, seed: int = 0, batch_size: int = 16) -> float:
    """KL(model || reference) per reply, in nats: the mean over `prompts` of
    sum_t log p_model(y_t) - log p_reference(y_t) for one reply y sampled from the model (T = 1).
    How far fine-tuning moved the model from where it started, on the replies it now gives."""
    total, start = 0.0, 0
    for batch in in_batches(prompts, batch_size, "KL to the reference", "reply"):
        queries = [tokenizer.encode(chat_prompt(tokenizer, p)) for p in batch]
        config = GenerationConfig(max_new_tokens=max_new_tokens, temperature=1.0, eos_id=tokenizer.stop_ids,
                                  seed=seed + start)
        start += len(batch)
        replies = generate_batch(model, queries, config, tokenizer)
        responses = [r.sampled_ids for r in replies]
        inputs, targets, _ = response_batch(queries, responses, tokenizer)  # (B, T) each
        total += (token_logprobs(model(inputs), targets) - token_logprobs(reference(inputs), targets)).sum().item()
    return total / len(prompts)

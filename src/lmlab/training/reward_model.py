"""A reward model as the recipes use it: scoring chats in one batch, and its loss over rankings.

`recipes.reward` trains it with `ranking_loss` on batches of `training.preference.ranking_chats` (its
files: `models.tuned_files.save_reward_head` / `load_reward_model`); PPO and sampled-pair DPO
(`training.rewards`) score their replies with `chat_rewards`.
"""

import torch

from lmlab.heads.reward import RewardModel
from lmlab.losses.bradley_terry import bradley_terry_loss, ranked_pairs
from lmlab.objectives.sft import chat_tokens
from lmlab.tokenizers.text import TextTokenizer


def chat_rewards(reward_model: RewardModel, tokenizer: TextTokenizer, chats: list[list[dict]],
                 block_size: int) -> torch.Tensor:
    """The reward of each chat (a prompt and the assistant's answer) -> (N,), scored in one batch.
    Chats are tokenized with the chat template, cut to `block_size` tokens and right-padded."""
    rows = [chat_tokens(tokenizer, chat, index)[0][:block_size] for index, chat in enumerate(chats)]
    T = max(len(ids) for ids in rows)
    pad = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    ids = torch.tensor([row + [pad] * (T - len(row)) for row in rows])  # (N, T)
    mask = torch.tensor([[1] * len(row) + [0] * (T - len(row)) for row in rows])  # (N, T)
    device = next(reward_model.parameters()).device
    return reward_model(ids.to(device), mask.to(device))


def ranking_loss(scores: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """InstructGPT's reward-model loss over a batch of rankings: for each prompt, the Bradley-Terry
    loss averaged over all K-choose-2 (better, worse) pairs of its K answers, then the mean over
    prompts (so a prompt with many answers does not outweigh the others). Also, per pair, 1.0 where
    the better answer scored higher. scores (sum of sizes,): each prompt's answers, best first."""
    losses, correct = [], []
    for rewards in scores.split(sizes):  # (K,) for one prompt
        better, worse = ranked_pairs(len(rewards))  # (K*(K-1)/2,) each
        losses.append(bradley_terry_loss(rewards[better], rewards[worse]))
        correct.append((rewards[better] > rewards[worse]).float())
    return torch.stack(losses).mean(), torch.cat(correct)

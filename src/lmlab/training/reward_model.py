"""A reward model as the recipes use it: scoring chats in one batch.

`recipes.reward` trains it (its files: `models.tuned_files.save_reward_head` / `load_reward_model`);
PPO and sampled-pair DPO (`training.rewards`) score their replies with `chat_rewards`.
"""

import torch

from lmlab.heads.reward import RewardModel
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

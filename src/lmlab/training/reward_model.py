"""A trained reward model as the other recipes use it: scoring chats in one batch, and the files a
`reward` run leaves (the backbone as a tuned run saves it, plus the scalar head) written and read back.

`recipes.reward` trains it and saves the head here; PPO and sampled-pair DPO (`training.rewards`)
load it and score their replies with `chat_rewards`.
"""

import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from lmlab.errors import LmlabError
from lmlab.heads.reward import RewardModel
from lmlab.io.atomic import atomic_path
from lmlab.objectives.sft import chat_tokens
from lmlab.tokenizers.text import TextTokenizer
from lmlab.training.finetune import load_tuned

HEAD_FILE = "reward_head.safetensors"


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


def save_head(reward_model: RewardModel, out: Path) -> Path:
    """Write the scalar head's weights to out/reward_head.safetensors, atomically."""
    with atomic_path(out / HEAD_FILE) as tmp:
        save_file({name: p.detach().cpu().contiguous() for name, p in reward_model.head.state_dict().items()}, tmp)
    return out / HEAD_FILE


def load_reward_model(out: str | os.PathLike) -> tuple[RewardModel, TextTokenizer]:
    """The reward model a `reward` run saved in `out` (its backbone, with the adapter when it has
    one, and its head), in eval mode, with the tokenizer it reads."""
    out = Path(out)
    if not (out / HEAD_FILE).is_file():
        raise LmlabError(f"'{out}' holds no reward model ({HEAD_FILE} is missing); pass the --out of a finished "
                         "`lmlab reward` run")
    backbone, tokenizer = load_tuned(out)
    reward_model = RewardModel(backbone)
    reward_model.head.load_state_dict(load_file(out / HEAD_FILE))
    return reward_model.eval(), tokenizer

"""Scalar heads on a language model's backbone: a reward model, and the value head PPO needs.

A reward model scores a prompt and an answer with one number (InstructGPT, Ouyang et al. 2022:
the SFT model with its unembedding replaced by a projection to a scalar):

    r(x, y) = w . h_last + b,     h_last = the backbone's final hidden state at the last real token

The last token has attended to the whole prompt and answer, so its hidden state can sum them
up; the LM head is not used. `ScalarHead` maps every position's hidden state to a number: read
at the last token it is the reward, read at every token it is PPO's value head.
"""

import torch
from torch import nn

from lmlab.modules.transformer import TransformerDecoder


class ScalarHead(nn.Module):
    """Hidden states (…, d_model) -> one number per position (…): a linear layer to 1 output."""

    def __init__(self, d_model: int):
        super().__init__()
        self.proj = nn.Linear(d_model, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.to(self.proj.weight.dtype)).squeeze(-1)


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """The position of each row's last real token: mask (B, T), 1 = real -> (B,). Works for left
    padding (prompts in a batch), right padding (answers of different lengths) and both."""
    positions = torch.arange(attention_mask.size(1), device=attention_mask.device)  # (T,)
    return torch.where(attention_mask.bool(), positions, -1).amax(dim=1)  # (B,)


class RewardModel(nn.Module):
    """A decoder's backbone (`hidden_states`, with any PEFT applied) plus a `ScalarHead` read at
    the last real token: token ids (B, T) -> rewards (B,)."""

    def __init__(self, backbone: TransformerDecoder):
        super().__init__()
        self.backbone = backbone
        weight = next(backbone.parameters())
        self.head = ScalarHead(backbone.config.d_model).to(weight.device)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids (B, T), attention_mask (B, T) with 1 on real tokens (None: no padding) -> (B,)."""
        hidden = self.backbone.hidden_states(input_ids, attention_mask)  # (B, T, C)
        if attention_mask is None:
            return self.head(hidden[:, -1])  # (B,)
        rows = torch.arange(hidden.size(0), device=hidden.device)  # (B,)
        return self.head(hidden[rows, last_token_index(attention_mask)])  # (B,)

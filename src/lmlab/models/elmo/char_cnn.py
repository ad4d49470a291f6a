"""The token encoder of ELMo: a word's vector computed from its characters, so any word has one."""

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.models.elmo.chars import N_CHARS, PAD
from lmlab.models.elmo.config import ElmoConfig


class Highway(nn.Module):
    """y = g * relu(W_h x) + (1 - g) * x with a learned gate g = sigmoid(W_g x): each feature chooses
    between a transformation of the input and the input itself."""

    def __init__(self, dim: int):
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)
        nn.init.constant_(self.gate.bias, -1.0)  # start by mostly carrying the input through

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., dim) -> (..., dim)
        g = torch.sigmoid(self.gate(x))
        return g * F.relu(self.transform(x)) + (1 - g) * x


class CharCNN(nn.Module):
    """Character ids (B, T, C) -> token vectors (B, T, d_model): character embeddings, one 1-D
    convolution per filter width, max over character positions, highway layers, projection."""

    def __init__(self, cfg: ElmoConfig):
        super().__init__()
        self.embed = nn.Embedding(N_CHARS, cfg.char_dim, padding_idx=PAD)
        self.convs = nn.ModuleList(nn.Conv1d(cfg.char_dim, n, width) for width, n in cfg.filters)
        self.highways = nn.ModuleList(Highway(cfg.n_filters) for _ in range(cfg.n_highway))
        self.project = nn.Linear(cfg.n_filters, cfg.d_model)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        B, T, C = chars.shape
        x = self.embed(chars.reshape(B * T, C)).transpose(1, 2)  # (B*T, char_dim, C)
        pooled = [F.relu(conv(x)).amax(dim=2) for conv in self.convs]  # each (B*T, n_filters_of_width)
        h = torch.cat(pooled, dim=1)  # (B*T, n_filters)
        for highway in self.highways:
            h = highway(h)
        return self.project(h).reshape(B, T, -1)  # (B, T, d_model)

"""The task-specific combination of ELMo's layers: ELMo_k = gamma * sum_j s_j h_kj, with
s = softmax(w) over the layers. A downstream task learns w and gamma (and the LM stays frozen)."""

import torch
from torch import nn


class ScalarMix(nn.Module):
    """Softmax-normalised weights over `n_layers` representations and a scale gamma; starts as the
    plain mean (w = 0, gamma = 1)."""

    def __init__(self, n_layers: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(n_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: list[torch.Tensor]) -> torch.Tensor:
        """layers: n_layers tensors of one shape (B, T, D) -> their mix (B, T, D)."""
        s = torch.softmax(self.weights, dim=0)
        return self.gamma * sum(s_j * h for s_j, h in zip(s, layers))

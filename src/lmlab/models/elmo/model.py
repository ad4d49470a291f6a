"""The biLM of ELMo: a shared character-CNN token encoder, a forward and a backward stack of LSTMs,
and a shared softmax. The forward LM reads left to right and predicts the next word; the backward
LM reads right to left and predicts the previous one. The second LSTM layer of each direction adds
its input to its output (a residual connection, as in the paper).

`layers` returns what a downstream task mixes: layer 0 is the token vector x_k repeated for both
directions ([x_k; x_k]), layer j >= 1 is [forward h_kj; backward h_kj], all (B, T, 2 * d_model).
"""

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.models.elmo.char_cnn import CharCNN
from lmlab.models.elmo.config import ElmoConfig

# PyTorch falls back from oneDNN to its own kernel for LSTMs with projections, and says so on every
# call; the fallback is correct, the message only noise.
warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """Reverse each sequence of x (B, T, ...) within its own length, padding left in place; with
    lengths None every row is full. Applying it twice gives x back."""
    if lengths is None:
        return x.flip(1)
    T = x.shape[1]
    t = torch.arange(T, device=x.device)[None, :]  # (1, T)
    index = torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)  # (B, T)
    return x.gather(1, index.reshape(*index.shape, *(1,) * (x.dim() - 2)).expand_as(x))


class LstmStack(nn.Module):
    """n_layers LSTMs reading left to right; layer 2 onwards adds its input to its output."""

    def __init__(self, cfg: ElmoConfig):
        super().__init__()
        self.lstms = nn.ModuleList(nn.LSTM(cfg.d_model, cfg.lstm_cells, proj_size=cfg.d_model, batch_first=True)
                                   for _ in range(cfg.n_layers))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every layer's states, each (B, T, d_model), for tokens x (B, T, d_model)."""
        states = []
        for i, lstm in enumerate(self.lstms):
            h, _ = lstm(x)
            x = h + x if i > 0 else h
            states.append(x)
        return states


class ElmoLM(nn.Module):
    def __init__(self, cfg: ElmoConfig):
        super().__init__()
        self.cfg = cfg
        self.token_encoder = CharCNN(cfg)
        self.forward_lm = LstmStack(cfg)
        self.backward_lm = LstmStack(cfg)
        self.softmax = nn.Linear(cfg.d_model, cfg.vocab_size)

    def directions(self, chars: torch.Tensor, lengths: torch.Tensor | None = None):
        """(tokens (B, T, d), forward states, backward states): lists of n_layers (B, T, d) each. The
        backward states at position k depend only on positions k..end (within `lengths`)."""
        tokens = self.token_encoder(chars)  # (B, T, d)
        forward = self.forward_lm(tokens)
        backward = [reverse_padded(h, lengths) for h in self.backward_lm(reverse_padded(tokens, lengths))]
        return tokens, forward, backward

    def layers(self, chars: torch.Tensor, lengths: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The n_layers + 1 representations a task mixes, each (B, T, 2 * d_model)."""
        tokens, forward, backward = self.directions(chars, lengths)
        return [torch.cat([tokens, tokens], -1)] + [torch.cat([f, b], -1) for f, b in zip(forward, backward)]

    def forward(self, chars: torch.Tensor, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(forward loss, backward loss) on a block of T words: chars (B, T, C), word ids (B, T).
        The forward LM predicts words 1..T-1 from positions 0..T-2, the backward LM words 0..T-2
        from positions 1..T-1; each loss is the mean cross-entropy in nats."""
        _, forward, backward = self.directions(chars)
        next_logits = self.softmax(forward[-1][:, :-1])  # (B, T-1, V)
        previous_logits = self.softmax(backward[-1][:, 1:])  # (B, T-1, V)
        forward_loss = F.cross_entropy(next_logits.flatten(0, 1), words[:, 1:].flatten())
        backward_loss = F.cross_entropy(previous_logits.flatten(0, 1), words[:, :-1].flatten())
        return forward_loss, backward_loss

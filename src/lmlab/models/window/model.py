"""The fixed-window neural LM (Bengio et al. 2003): the next token depends on the last n tokens only.

    e = [E[w_{t-n+1}]; …; E[w_t]]          (n embeddings, concatenated: n * d_model)
    h = tanh(W e + b)                       (hidden)
    logits = U h + c                        (vocab_size)

Positions before the start of the text read a learned "no token" embedding, so every position
gets a prediction. The state carried between calls is the last n - 1 tokens (-1 for "none yet").
Bengio et al. also connect e directly to the output; this version leaves that out.
"""

import torch
from torch import nn

from lmlab.models.window.config import WindowConfig

NO_TOKEN = -1  # what the state holds where the text has not started yet
State = tuple[torch.Tensor]  # (the last n - 1 token ids (B, n - 1),)


class WindowLM(nn.Module):
    """A fixed-window neural language model (a `StatefulLM`)."""

    def __init__(self, config: WindowConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.no_token = nn.Parameter(torch.zeros(config.d_model))  # the embedding of "before the text"
        self.hidden = nn.Linear(config.window * config.d_model, config.hidden)
        self.dropout = nn.Dropout(config.dropout)
        self.lm_head = nn.Linear(config.hidden, config.vocab_size)
        nn.init.uniform_(self.token_embedding.weight, -0.1, 0.1)
        if config.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight

    def initial_state(self, batch_size: int) -> State:
        """No tokens read yet: n - 1 placeholders per sequence."""
        return (torch.full((batch_size, self.config.window - 1), NO_TOKEN, device=self.no_token.device),)

    def reset_rows(self, state: State, rows: torch.Tensor) -> State:
        """`state` with the sequences where `rows` (B,) bool is True set back to "no token read yet"."""
        return (torch.where(rows[:, None], NO_TOKEN, state[0]),)  # (B, n - 1)

    def reorder_state(self, state: State, rows: torch.Tensor) -> State:
        """The state of the sequences `rows` (R,) of the batch, in that order (beam search's survivors)."""
        return (state[0][rows],)  # (R, n - 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token logits (B, T, V) for ids (B, T), as if the text started at ids[:, 0]."""
        return self.unroll(ids, self.initial_state(ids.shape[0]))[0]

    def unroll(self, ids: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """Read ids (B, T) after the tokens in `state`: logits at every position (B, T, V) and the new state."""
        B, T = ids.shape
        n = self.config.window
        tokens = torch.cat([state[0], ids], dim=1)  # (B, n - 1 + T)
        windows = tokens.unfold(1, n, 1)  # (B, T, n): the n tokens ending at each position
        known = (windows != NO_TOKEN)[..., None]  # (B, T, n, 1)
        embedded = torch.where(known, self.token_embedding(windows.clamp(min=0)), self.no_token)  # (B, T, n, d)
        hidden = torch.tanh(self.hidden(self.dropout(embedded.reshape(B, T, -1))))  # (B, T, hidden)
        return self.lm_head(self.dropout(hidden)), (tokens[:, T:],)  # (B, T, V), (B, n - 1)

    def step(self, ids: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """Logits after the last of ids (B, T) read after `state` (B, V), and the new state."""
        logits, state = self.unroll(ids, state)
        return logits[:, -1], state

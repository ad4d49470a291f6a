"""A recurrent language model: embed each token, run it through stacked recurrent layers, and
read the next-token logits off the top layer's hidden state.

    x_t = E[w_t];   h_t = cell(x_t, h_{t-1}) per layer;   logits_t = W h_t + b

The recurrence runs in `torch.nn.RNN / LSTM / GRU` (`FusedStack`) for speed; the equations it
computes are written out in `lmlab.modules.recurrent` and tested equal to it. The state carried
between calls (`step`, truncated BPTT) is the hidden state, plus the cell state for an LSTM.
"""

import torch
from torch import nn

from lmlab.models.rnn.config import RNNConfig
from lmlab.modules.recurrent.stack import FusedStack, zero_state

State = tuple[torch.Tensor, ...]  # (h,) or (h, c), each (n_layers, B, hidden)


class RNNLM(nn.Module):
    """An Elman RNN, LSTM or GRU language model (a `StatefulLM`)."""

    def __init__(self, config: RNNConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = FusedStack(config.cell, config.d_model, config.hidden, config.n_layers, config.dropout)
        self.lm_head = nn.Linear(config.hidden, config.vocab_size)
        self._init_weights()
        if config.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight

    def _init_weights(self) -> None:
        """Unit-normal embeddings (torch's default), a small uniform output layer, zero output bias;
        an LSTM's forget gates start at bias 1 (Jozefowicz et al. 2015), so the cell keeps most of
        its past from the first step.

        The embedding scale decides whether a two-layer LSTM learns. Unit inputs give the first
        layer's gate pre-activations a std of ~0.6 with torch's recurrent weights (uniform in
        ±1/sqrt(hidden)), so the gates respond to the token, and tied, they give logits of std
        ~sqrt(d_model) |h|. The ±0.1 embeddings of SGD-era recipes (Zaremba et al.) give ~0.03 and
        logits near zero; AdamW moves each weight by about lr per step, so they take hundreds of
        steps to grow. A GRU copes, but a two-layer LSTM, whose output o * tanh(c) is about half
        its input at each layer, stayed near unigram loss: markov corpus, 2 x 256 tied, 300 steps,
        validation perplexity 40 against the GRU's 8 (docs/benchmarks.md: classic against neural LMs)."""
        nn.init.normal_(self.token_embedding.weight)
        nn.init.uniform_(self.lm_head.weight, -0.1, 0.1)
        nn.init.zeros_(self.lm_head.bias)
        if self.config.cell == "lstm":
            hidden = self.config.hidden
            with torch.no_grad():
                for k in range(self.config.n_layers):
                    getattr(self.layers.rnn, f"bias_ih_l{k}")[hidden:2 * hidden] = 1.0  # gates i, f, g, o
                    getattr(self.layers.rnn, f"bias_hh_l{k}")[hidden:2 * hidden] = 0.0

    def initial_state(self, batch_size: int) -> State:
        """Zero hidden (and cell) states for `batch_size` sequences."""
        c = self.config
        return zero_state(c.cell, c.n_layers, batch_size, c.hidden, self.lm_head.weight.device)

    def reset_rows(self, state: State, rows: torch.Tensor) -> State:
        """`state` with the sequences where `rows` (B,) bool is True set back to the initial state."""
        keep = (~rows).to(state[0].dtype)[None, :, None]  # (1, B, 1)
        return tuple(part * keep for part in state)

    def reorder_state(self, state: State, rows: torch.Tensor) -> State:
        """The state of the sequences `rows` (R,) of the batch, in that order (beam search's survivors)."""
        return tuple(part[:, rows] for part in state)  # (n_layers, R, hidden) each

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token logits (B, T, V) for ids (B, T), starting from the zero state."""
        return self.unroll(ids, self.initial_state(ids.shape[0]))[0]

    def unroll(self, ids: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """Read ids (B, T) after `state`: logits at every position (B, T, V) and the state after the last."""
        return self.unroll_embeddings(self.token_embedding(ids), state)

    def unroll_embeddings(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """`unroll` from the input embeddings x (B, T, d_model), so gradients with respect to them
        can be measured (lmlab.eval.vanishing_gradients)."""
        out, state = self.layers(self.dropout(x), state)  # (B, T, H)
        return self.lm_head(self.dropout(out)), state  # (B, T, V)

    def step(self, ids: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """Logits after the last of ids (B, T) read after `state` (B, V), and the new state."""
        logits, state = self.unroll(ids, state)
        return logits[:, -1], state

"""The interface shared by the language models that came before transformers (n-gram, fixed-window,
RNN/LSTM/GRU), so that one `lmlab.load`, one perplexity and one generation loop serve them all.

A transformer reads its whole prefix at every step (through its KV cache); these models carry a
state instead: the last n-1 tokens for an n-gram or a window LM, the hidden vectors for an RNN.
Beam search also needs `reorder_state(state, rows) -> state`, the state of batch rows `rows` (R,) in
that order; n-gram, window and RNN LMs have it. It is not part of the protocol: a model without it
still loads, scores and generates greedily or by sampling.
"""

from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class StatefulLM(Protocol):
    """What a pre-transformer LM provides. `config` has `model_type`, `vocab_size` and
    `context_length` (the window `lmlab eval perplexity` scores in; an RNN or n-gram may choose any)."""

    config: Any

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) for token ids (B, T): log_softmax of them is the model's next-token log-probs."""

    def initial_state(self, batch_size: int) -> Any:
        """The state before any token has been read."""

    def step(self, ids: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """Read ids (B, T) after `state`; return the next-token logits after the last one (B, V) and
        the state that now includes them."""

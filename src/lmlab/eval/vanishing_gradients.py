"""How much the loss at one step depends, through the recurrence, on inputs k steps back.

For a sequence of K + 1 tokens, take the loss of the prediction after the last one, L_K, and the
norm of its gradient with respect to each input embedding x_{K-k}: || dL_K / dx_{K-k} ||. For an
Elman RNN this is a product of k Jacobians W_hh^T diag(tanh') and shrinks geometrically with k
(the vanishing gradient); an LSTM's cell state (and a GRU's gated copy of h) lets it survive longer.
"""

import numpy as np
import torch

from lmlab.models.rnn import RNNLM


def gradient_norms_by_distance(model: RNNLM, ids: torch.Tensor) -> np.ndarray:
    """Mean over the batch of || dL_T / dx_{T-k} || for k = 0 .. T-1, where ids is (B, T + 1) and
    L_T is the cross-entropy of predicting ids[:, T] after reading ids[:, :T] from the zero state."""
    inputs, target = ids[:, :-1], ids[:, -1]  # (B, T), (B,)
    was_training = model.training
    model.eval()  # no dropout: measure the function itself
    x = model.token_embedding(inputs).detach().requires_grad_(True)  # (B, T, d_model)
    logits, _ = model.unroll_embeddings(x, model.initial_state(ids.shape[0]))  # (B, T, V)
    # Each row's loss depends on its own inputs only, so one backward pass of the sum gives every row's gradient.
    torch.nn.functional.cross_entropy(logits[:, -1].float(), target, reduction="sum").backward()
    model.train(was_training)
    norms = x.grad.norm(dim=-1).mean(dim=0)  # (T,), position t
    return norms.flip(0).numpy()  # index k = distance back from the last input


def decay_per_step(norms: np.ndarray) -> float:
    """The factor the gradient norm is multiplied by per step back: 10 ** (slope of a least-squares
    line through log10(norm) against k, for k >= 1; k = 0 is the direct path, not the recurrence)."""
    k = np.arange(1, len(norms))
    slope = np.polyfit(k, np.log10(np.maximum(norms[1:], 1e-300)), 1)[0]
    return float(10 ** slope)

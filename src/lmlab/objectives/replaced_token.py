"""Replaced-token detection (ELECTRA) as a transformation: the generator's guesses go back into the text.

The generator, trained by masked LM, proposes a token for every masked position, sampled from its
softmax (not its argmax: a plausible but wrong token is the hard case the discriminator learns
from). The discriminator reads the original ids with those positions replaced by the samples, and
labels every token: 1 if it differs from the original, 0 otherwise (a sample that happens to be
the original token counts as original). Sampling is not differentiable, and ELECTRA does not try:
the generator learns from its MLM loss only, the discriminator from the labels.
"""

import torch

RTD_WEIGHT = 50.0  # lambda in loss = MLM + lambda * RTD: the binary loss is ~50x smaller per token


@torch.no_grad()
def replace_with_samples(ids: torch.Tensor, chosen: torch.Tensor, logits: torch.Tensor,
                         generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (B, T), chosen (B, T) bool, and the generator's logits (N, V) at the N chosen positions
    (row-major order) -> the discriminator's inputs (B, T) and labels (B, T) float, 1 = replaced."""
    samples = torch.multinomial(torch.softmax(logits.float(), dim=-1), 1, generator=generator).squeeze(-1)  # (N,)
    inputs = ids.clone()
    inputs[chosen] = samples
    return inputs, (inputs != ids).float()

"""How well an encoder-decoder maps sources to targets, and where it looked while doing it.

Sequence accuracy: the share of outputs exactly equal to their reference (a date with one wrong
digit is wrong). Character accuracy: characters equal at the same position, over the longer of
output and reference at each example (missing or extra characters count as wrong), summed over
examples; it tells "nearly right" from "nonsense" where sequence accuracy cannot.
"""

import torch

from lmlab.models.seq2seq import Seq2Seq


def sequence_accuracy(outputs: list[str], references: list[str]) -> float:
    """Share of outputs identical to their reference."""
    _check_lengths(outputs, references)
    return sum(o == r for o, r in zip(outputs, references)) / len(references)


def char_accuracy(outputs: list[str], references: list[str]) -> float:
    """Position-wise equal characters / sum of max(len(output), len(reference)); see the module docstring."""
    _check_lengths(outputs, references)
    right = sum(a == b for o, r in zip(outputs, references) for a, b in zip(o, r))
    total = sum(max(len(o), len(r)) for o, r in zip(outputs, references))
    return right / total if total else 1.0


def _check_lengths(outputs: list[str], references: list[str]) -> None:
    if len(outputs) != len(references) or not references:
        raise ValueError(f"need as many outputs as references (at least one), got {len(outputs)} and "
                         f"{len(references)}")


@torch.inference_mode()
def attention_map(model: Seq2Seq, source: list[int], output: list[int]) -> torch.Tensor | None:
    """Attention weights (T, S) of the decoder producing `output` (ids ending with </s>) from `source`
    (ids ending with </s>): row t is where it looked to write output[t]. None without attention."""
    device = next(model.parameters()).device
    encoded = model.encode(torch.tensor([source], device=device))
    tgt_in = torch.tensor([[model.config.bos_id] + output[:-1]], device=device)  # (1, T)
    _, _, weights = model.decode(tgt_in, encoded)  # (1, T, S)
    return None if weights is None else weights[0].float().cpu()

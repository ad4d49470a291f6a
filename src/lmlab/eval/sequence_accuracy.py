"""How well a sequence-to-sequence model (the RNN seq2seq, T5, BART) maps sources to targets, scored on its
output strings.

Sequence accuracy: the share of outputs exactly equal to their reference (a date with one wrong
digit is wrong). Character accuracy: characters equal at the same position, over the longer of
output and reference at each example (missing or extra characters count as wrong), summed over
examples; it tells "nearly right" from "nonsense" where sequence accuracy cannot.
"""


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

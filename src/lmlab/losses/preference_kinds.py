"""The names of the preference losses `losses/dpo.py` computes, and which of them need no reference model or
take --label-smoothing: torch-free, so that the CLI's parsers and the DPO settings read them without loading torch."""

import typing
from typing import Literal

PreferenceLoss = Literal["dpo", "ipo", "cdpo", "robust", "simpo", "orpo"]
PREFERENCE_LOSSES: tuple[str, ...] = typing.get_args(PreferenceLoss)
REFERENCE_FREE = ("simpo", "orpo")  # these need no reference model: none is built, no reference log-probs computed
LABEL_SMOOTHED = ("cdpo", "robust", "simpo")  # the losses --label-smoothing changes

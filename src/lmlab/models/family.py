"""What lmlab knows of one family of models: its kind, how to build it, how its files are read, its presets.

Each family defines its record beside its converter or files module (`models/<family>/family.py`);
`models/registry.py` lists them all, so the loaders, `lmlab.preset` and `lmlab list` look a
family up in one table.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

Kind = Literal["decoder", "encoder", "encoder-decoder", "classic"]
KINDS: tuple[Kind, ...] = ("decoder", "encoder", "encoder-decoder", "classic")

# what a user reads a saved model with: the three loaders of the front door, or a family's own command
LOAD, LOAD_ENCODER, LOAD_ENCODER_DECODER = "lmlab.load", "lmlab.load_encoder", "lmlab.load_encoder_decoder"


@dataclass(frozen=True)
class Family:
    """One family. `name` is what its configs call it (`cfg.family`, or a classic model's own
    model_type), `model_type` what its saved config.json says (HF's name where HF has the family).
    Hugging Face families have a `convert` module (config_from_hf, config_to_hf, from_hf, to_hf) and
    are read by their kind's reader; classic families have their own `read` of a model directory."""

    name: str
    kind: Kind
    reader: str  # LOAD, LOAD_ENCODER, LOAD_ENCODER_DECODER or the command that uses a saved model
    build: Callable[[Any], Any] | None = None  # config -> a freshly initialised network (None: fitted, not built)
    convert: ModuleType | None = None  # HF families: conversion of configs and tensor names
    read: Callable[[Path], Any] | None = None  # classic families: the model saved in a directory
    presets: dict[str, Any] = field(default_factory=dict)  # preset name -> config
    traits: tuple[str, ...] = ()  # config fields that tell its presets apart beyond the shape (`lmlab list`)
    model_type: str = ""  # empty: the same as `name`

    def __post_init__(self):
        if not self.model_type:
            object.__setattr__(self, "model_type", self.name)

    @property
    def title(self) -> str:
        """How an error names a model of this family: 'ROBERTA encoder', 'elmo model'."""
        return f"{self.model_type} model" if self.kind == "classic" else f"{self.model_type.upper()} {self.kind}"

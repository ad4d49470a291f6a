"""What lmlab knows of one family of models, decided in one place: its kind, how it is built, how its
files are read (HF directory, GGUF file or its own), its config class and presets, and how it is trained.

Each family defines its record beside its converter or files module (`models/<family>/family.py`);
`models/registry.py` lists them all, so the loaders, the quantizers, the recipes, `lmlab.train`,
`lmlab train`, `lmlab.preset` and `lmlab list` look a family up in one table instead of keeping
tables of their own.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from lmlab.tokenizers.encoder_decoder_bpe import PAD

Kind = Literal["decoder", "encoder", "encoder-decoder", "classic"]
KINDS: tuple[Kind, ...] = ("decoder", "encoder", "encoder-decoder", "classic")

# what a user reads a saved model with: the three loaders of the front door, or a family's own command
LOAD, LOAD_ENCODER, LOAD_ENCODER_DECODER = "lmlab.load", "lmlab.load_encoder", "lmlab.load_encoder_decoder"
TRAIN = "lmlab train"  # the command that pre-trains most families; the others name their own


@dataclass(frozen=True)
class Family:
    """One family. `name` is what its configs call it (`cfg.family`, or a classic model's own
    model_type), `model_type` what its saved config.json says (HF's name where HF has the family).
    Hugging Face families have a `convert` module (config_from_hf, config_to_hf, from_hf, to_hf) and
    are read by their kind's reader; classic families have their own `read` of a model directory."""

    name: str
    kind: Kind
    reader: str  # LOAD, LOAD_ENCODER, LOAD_ENCODER_DECODER or the command that uses a saved model
    config_class: type  # the frozen dataclass its configs and presets are (ModelConfig, EncoderConfig, RNNConfig, …)
    recipe: str  # the module of lmlab.recipes that pre-trains it (pretrain, pretrain_encoder, neural_lm, word2vec, …)
    command: str = TRAIN  # the command that runs `recipe`: `lmlab train`, or the family's own (`lmlab word2vec train`)
    build: Callable[[Any], Any] | None = None  # config -> a freshly initialised network (None: fitted, not built)
    convert: ModuleType | None = None  # HF families: conversion of configs and tensor names
    gguf: ModuleType | None = None  # GGUF conversion (ARCHITECTURE, config_from_gguf, from_gguf, …); None: no GGUF
    read: Callable[[Path], Any] | None = None  # classic families: the model saved in a directory
    presets: dict[str, Any] = field(default_factory=dict)  # preset name -> config
    traits: tuple[str, ...] = ()  # config fields that tell its presets apart beyond the shape (`lmlab list`)
    model_type: str = ""  # empty: the same as `name`
    objective: str = ""  # its default pre-training objective (a name in objectives/registry.py); "": none to choose
    objectives: tuple[str, ...] = ()  # the objectives it can train with, if only some of its kind's; (): all
    masking: Literal["static", "dynamic"] = "static"  # encoders: MLM masks drawn once, or afresh each epoch (RoBERTa)
    decoder_start: str = PAD  # encoder-decoders: the token a decoder trained from scratch starts from (BART: </s>)
    source_bos: bool = False  # encoder-decoders: sources start with <s> (BART), not with their first word

    def __post_init__(self):
        if not self.model_type:
            object.__setattr__(self, "model_type", self.name)

    @property
    def title(self) -> str:
        """How an error names a model of this family: 'ROBERTA encoder', 'elmo model'."""
        return f"{self.model_type} model" if self.kind == "classic" else f"{self.model_type.upper()} {self.kind}"

"""Every named preset in one registry, of every kind: decoders, encoders, encoder-decoders and the
classic models (n-gram, window, RNN/LSTM/GRU, RNN seq2seq, word2vec, ELMo).

Each table sits beside its config class (`config.PRESETS`, `config.ENCODER_PRESETS`,
`models.encoder_decoder.config.ENCODER_DECODER_PRESETS`, `models.rnn.config.RNN_PRESETS`, …) and each
family's record (`models.registry`) holds its own; `preset` is the one way to get a config from a
name, whatever its kind, and `lmlab list --presets` shows them all with their kind and family.
"""

import dataclasses
from typing import Any

from lmlab.config import checked_replace
from lmlab.errors import LmlabError
from lmlab.models.family import Family
from lmlab.models.registry import FAMILIES


def names(kind: str | None = None) -> list[str]:
    """Every preset's name (of the families of `kind`, when given), family by family in the registry's order."""
    return [name for family in FAMILIES.values() if kind in (None, family.kind) for name in family.presets]


def preset(name: str, **overrides) -> Any:
    """The config of the preset `name`, of whichever kind, with `overrides` applied (checked like the preset)."""
    family = family_of(name)
    cfg = family.presets[name]
    if not overrides:
        return cfg
    return cfg.replace(**overrides) if family.kind != "classic" else checked_replace(cfg, family.name, overrides)


def family_of(name: str) -> Family:
    """The registry's record of the family the preset `name` belongs to; an unknown name is one error."""
    for family in FAMILIES.values():
        if name in family.presets:
            return family
    raise LmlabError(f"unknown preset '{name}'; choose one of: {', '.join(names())} (`lmlab list --presets`)")


def kind(name: str) -> str:
    """'decoder', 'encoder', 'encoder-decoder' or 'classic': which kind of model the preset `name` builds."""
    return family_of(name).kind


def summary(name: str) -> dict[str, str]:
    """What `lmlab list --presets` shows of a preset: kind, family, layers, width, heads, vocabulary,
    context ("-" where the family has none) and the settings that tell its family's presets apart."""
    family = family_of(name)
    cfg = dataclasses.asdict(family.presets[name])
    layers = cfg.get("n_layers") or (f"{cfg['n_encoder_layers']}+{cfg['n_decoder_layers']}"
                                     if "n_encoder_layers" in cfg else None)
    width = next((cfg[key] for key in ("d_model", "dim", "embed_dim") if key in cfg), None)
    context = cfg.get("context_length") or cfg.get("max_source_length")
    shown = {"name": name, "kind": family.kind, "family": family.name, "layers": layers, "d_model": width,
             "heads": cfg.get("n_heads"), "vocab": cfg.get("vocab_size"), "context": context,
             "settings": " ".join(f"{trait}={cfg[trait]}" for trait in family.traits)}
    return {key: "-" if value in (None, "") else str(value) for key, value in shown.items()}

"""Every named preset in one registry: decoders, encoders and encoder-decoders, by name.

Each kind's table sits beside its config class (`config.PRESETS`, `config.ENCODER_PRESETS`,
`models.encoder_decoder.config.ENCODER_DECODER_PRESETS`); `preset` is the one way to get a config
from a name, whatever its kind, so `lmlab.preset("bert-tiny")` and `lmlab train --model bert-tiny`
need not know it, and `lmlab list --presets` shows them all.
"""

import dataclasses

from lmlab.config import ENCODER_PRESETS, PRESETS as DECODER_PRESETS, EncoderConfig, ModelConfig
from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.config import ENCODER_DECODER_PRESETS, EncoderDecoderConfig

KINDS = {"decoder": DECODER_PRESETS, "encoder": ENCODER_PRESETS, "encoder-decoder": ENCODER_DECODER_PRESETS}
PRESETS: dict[str, ModelConfig | EncoderConfig | EncoderDecoderConfig] = {
    name: cfg for presets in KINDS.values() for name, cfg in presets.items()}
assert len(PRESETS) == sum(len(p) for p in KINDS.values()), "a preset name is used by two kinds"


def preset(name: str, **overrides) -> ModelConfig | EncoderConfig | EncoderDecoderConfig:
    """The config of the preset `name`, of whichever kind, with `overrides` applied."""
    if name not in PRESETS:
        raise LmlabError(f"unknown preset '{name}'; choose one of: {', '.join(PRESETS)} (`lmlab list --presets`)")
    return PRESETS[name].replace(**overrides) if overrides else PRESETS[name]


def kind(name: str) -> str:
    """'decoder', 'encoder' or 'encoder-decoder': which kind of model the preset `name` builds."""
    return next(k for k, presets in KINDS.items() if name in presets)


def summary(name: str) -> dict:
    """What `lmlab list --presets` shows of a preset: kind, family, layers, width, heads, vocabulary, context."""
    cfg = dataclasses.asdict(PRESETS[name])
    layers = cfg.get("n_layers") or f"{cfg['n_encoder_layers']}+{cfg['n_decoder_layers']}"
    context = cfg.get("context_length") or cfg.get("max_source_length")
    return {"name": name, "kind": kind(name), "family": cfg["family"], "layers": layers, "d_model": cfg["d_model"],
            "heads": cfg["n_heads"], "vocab": cfg["vocab_size"], "context": context}

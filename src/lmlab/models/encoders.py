"""The encoder families (bert, roberta, albert, electra) as the registry has them: `build(cfg)` makes
the encoder `cfg.family` names, `converter(model_type)` gives its HF conversion module."""

from types import ModuleType

from torch import nn

from lmlab.config import EncoderConfig
from lmlab.models import registry


def build(cfg: EncoderConfig) -> nn.Module:
    """A freshly initialised encoder of `cfg.family` (BertEncoder or AlbertEncoder; same interface)."""
    return registry.lookup(cfg.family, kind="encoder").build(cfg)


def converter(model_type: str) -> ModuleType:
    """The HF conversion module of an encoder family (config_from_hf, from_hf, to_hf, head tables)."""
    return registry.lookup(model_type, kind="encoder").convert


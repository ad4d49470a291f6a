"""The encoder families (bert, roberta, albert, electra, deberta) as the registry has them: `build(cfg)` makes
the encoder `cfg.family` names, `converter(model_type)` gives its HF conversion module."""

from types import ModuleType

from torch import nn

from lmlab.config import EncoderConfig
from lmlab.models import registry
from lmlab.modules.pooling import ClsPooler, ContextPooler


def build(cfg: EncoderConfig) -> nn.Module:
    """A freshly initialised encoder of `cfg.family` (BertEncoder, AlbertEncoder or DebertaEncoder; same interface)."""
    return registry.lookup(cfg.family, kind="encoder").build(cfg)


def converter(model_type: str) -> ModuleType:
    """The HF conversion module of an encoder family (config_from_hf, from_hf, to_hf, head tables)."""
    return registry.lookup(model_type, kind="encoder").convert



def new_pooler(cfg: EncoderConfig) -> nn.Module:
    """A fresh [CLS] pooler of the kind `cfg.family` uses, for a head that reads one (DeBERTa: GELU, others: tanh)."""
    return ContextPooler(cfg.d_model) if cfg.family == "deberta" else ClsPooler(cfg.d_model)

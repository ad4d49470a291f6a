"""Every encoder family in one table: its builder and its HF conversion module, by family name
(which is also HF's `model_type`). `build(cfg)` makes the encoder `cfg.family` names."""

from collections.abc import Callable
from types import ModuleType

from torch import nn

from lmlab.config import EncoderConfig
from lmlab.errors import LmlabError
from lmlab.models.albert import convert as albert
from lmlab.models.albert.build import build_albert
from lmlab.models.bert import convert as bert
from lmlab.models.bert.build import build_encoder
from lmlab.models.electra import convert as electra
from lmlab.models.electra.build import build_electra
from lmlab.models.roberta import convert as roberta
from lmlab.models.roberta.build import build_roberta

ENCODER_FAMILIES: dict[str, tuple[Callable[[EncoderConfig], nn.Module], ModuleType]] = {
    "bert": (build_encoder, bert),
    "roberta": (build_roberta, roberta),
    "albert": (build_albert, albert),
    "electra": (build_electra, electra),
}


def build(cfg: EncoderConfig) -> nn.Module:
    """A freshly initialised encoder of `cfg.family` (BertEncoder or AlbertEncoder; same interface)."""
    return ENCODER_FAMILIES[cfg.family][0](cfg)


def converter(model_type: str) -> ModuleType:
    """The HF conversion module of an encoder family (config_from_hf, from_hf, to_hf, head tables)."""
    if model_type not in ENCODER_FAMILIES:
        raise LmlabError(f"'{model_type}' is not an encoder family lmlab reads; it reads: "
                         f"{', '.join(ENCODER_FAMILIES)}")
    return ENCODER_FAMILIES[model_type][1]

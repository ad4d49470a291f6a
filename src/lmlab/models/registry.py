"""Which conversion module serves which family, and the HF `model_type` of each."""

from types import ModuleType

from lmlab.errors import LmlabError
from lmlab.models.bert import convert as bert
from lmlab.models.gpt2 import convert as gpt2
from lmlab.models.llama import convert as llama

# bert is an encoder: lmlab.load refuses it, lmlab.models.load.load_encoder reads it
FAMILIES: dict[str, ModuleType] = {"gpt2": gpt2, "llama": llama, "bert": bert}


def family(name: str) -> ModuleType:
    """The conversion module for a family or HF `model_type` name."""
    if name not in FAMILIES:
        raise LmlabError(f"unsupported architecture '{name}'; lmlab loads: {', '.join(FAMILIES)}")
    return FAMILIES[name]

"""Every family lmlab builds, reads and writes, in one table: decoders, encoders, encoder-decoders and
the classic models. Each record is defined beside its family's converter or files module
(`models/<family>/family.py`); the loaders dispatch on a directory's `model_type` through `lookup`
and on a GGUF file's `general.architecture` through `lookup_gguf`, every decoder is built through
`build`, `lmlab.train` finds a config's family with `of_config`, `lmlab.preset` serves the families'
presets and `lmlab list --families` shows them. Adding a family is its folder and one line in FAMILIES."""

from types import ModuleType
from typing import Any

from lmlab.errors import LmlabError
from lmlab.models.albert.family import FAMILY as ALBERT
from lmlab.models.bart.family import FAMILY as BART
from lmlab.models.bert.family import FAMILY as BERT
from lmlab.models.deberta.family import FAMILY as DEBERTA
from lmlab.models.electra.family import FAMILY as ELECTRA
from lmlab.models.elmo.family import FAMILY as ELMO
from lmlab.models.family import KINDS, Family, Kind
from lmlab.models.gemma2.family import FAMILY as GEMMA2
from lmlab.models.gemma3.family import FAMILY as GEMMA3
from lmlab.models.gpt2.family import FAMILY as GPT2
from lmlab.models.llama.family import FAMILY as LLAMA
from lmlab.models.mistral.family import FAMILY as MISTRAL
from lmlab.models.ngram.family import FAMILY as NGRAM
from lmlab.models.olmo2.family import FAMILY as OLMO2
from lmlab.models.phi3.family import FAMILY as PHI3
from lmlab.models.qwen2.family import FAMILY as QWEN2
from lmlab.models.qwen3.family import FAMILY as QWEN3
from lmlab.models.rnn.family import FAMILY as RNN
from lmlab.models.roberta.family import FAMILY as ROBERTA
from lmlab.models.seq2seq.family import FAMILY as SEQ2SEQ_RNN
from lmlab.models.t5.family import FAMILY as T5
from lmlab.models.transformer.family import FAMILY as TRANSFORMER
from lmlab.models.window.family import FAMILY as WINDOW
from lmlab.models.word2vec.family import FAMILY as WORD2VEC

FAMILIES: dict[str, Family] = {family.name: family for family in (
    # decoders
    GPT2,
    LLAMA,
    MISTRAL,
    QWEN2,
    GEMMA2,
    GEMMA3,
    QWEN3,
    PHI3,
    OLMO2,
    # encoders
    BERT,
    ROBERTA,
    ALBERT,
    ELECTRA,
    DEBERTA,
    # encoder-decoders
    TRANSFORMER,
    T5,
    BART,
    # classic models
    NGRAM,
    WINDOW,
    RNN,
    SEQ2SEQ_RNN,
    ELMO,
    WORD2VEC,
)}
assert len({f.model_type for f in FAMILIES.values()}) == len(FAMILIES), "two families save the same model_type"


def lookup(name: str, source: str = "", kind: Kind | None = None) -> Family:
    """The family called `name` (`cfg.family`) or saving `name` as its model_type (config.json's),
    of `kind` if given. An unknown name is one error listing every model_type lmlab reads and what
    reads it; a family of another kind, one error naming what reads it. `source` (a directory)
    starts the message."""
    family = FAMILIES.get(name) or next((f for f in FAMILIES.values() if f.model_type == name), None)
    if family is None:
        where = f"'{source}' holds " if source else ""
        raise LmlabError(f"{where}model_type {name!r}, which lmlab does not read; it reads {readable()}")
    if kind is not None and family.kind != kind:
        where = f"'{source}' holds" if source else f"'{name}' is"
        article = "an" if kind.startswith("e") else "a"
        raise LmlabError(f"{where} a {family.title}, not {article} {kind} ({', '.join(model_types(kind))}); "
                         f"read it with {family.reader}")
    return family


def readable() -> str:
    """Every model_type lmlab reads, grouped by what reads it: 'gpt2, llama, … (lmlab.load); bert, … (…)'."""
    readers = {}
    for family in FAMILIES.values():
        readers.setdefault(family.reader, []).append(family.model_type)
    return "; ".join(f"{', '.join(types)} ({reader})" for reader, types in readers.items())


def model_types(kind: Kind) -> tuple[str, ...]:
    """The model_types a saved model of `kind` may carry, in table order."""
    assert kind in KINDS, kind
    return tuple(family.model_type for family in FAMILIES.values() if family.kind == kind)


def family(name: str) -> ModuleType:
    """The Hugging Face conversion module (config_from_hf, config_to_hf, from_hf, to_hf) of the family or
    HF `model_type` `name`."""
    found = lookup(name)
    if found.convert is None:
        raise LmlabError(f"{found.title}s have no Hugging Face form; read them with {found.reader}")
    return found.convert


def build(cfg) -> Any:
    """A freshly initialised network for `cfg`, built by its family (`of_config`): the one way a model is
    built from a config, whichever family it is."""
    family = of_config(cfg)
    if family.build is None:
        raise LmlabError(f"{family.title}s are fitted, not built; train one with `{family.command}`")
    return family.build(cfg)


def of_config(cfg) -> Family:
    """The family a config describes: the one its `family` field names, or for a classic config (which
    has none) the family whose config class it is."""
    name = getattr(cfg, "family", None)
    if name is not None:
        return lookup(name)
    found = [family for family in FAMILIES.values() if type(cfg) is family.config_class]
    if len(found) != 1:
        raise LmlabError(f"a {type(cfg).__name__} is the config of no family lmlab builds; pass a preset's config "
                         "(`lmlab.preset(NAME)`, `lmlab list --presets`)")
    return found[0]


def lookup_gguf(architecture: str, source: str = "the GGUF file") -> Family:
    """The family whose GGUF conversion reads `architecture` (a file's `general.architecture`): the first in
    table order, since llama.cpp writes some families under another's architecture (Mistral as `llama`),
    whose conversion reads them. Any other architecture is one error listing those lmlab reads."""
    for family in FAMILIES.values():
        if family.gguf is not None and family.gguf.ARCHITECTURE == architecture:
            return family
    shown = repr(architecture[:80]) if isinstance(architecture, str) else f"of type {type(architecture).__name__}"
    raise LmlabError(f"{source}: GGUF architecture {shown} is not supported yet; lmlab loads: "
                     f"{', '.join(gguf_architectures())}")


def gguf_architectures() -> tuple[str, ...]:
    """Every GGUF `general.architecture` lmlab reads, once each, in table order."""
    return tuple(dict.fromkeys(family.gguf.ARCHITECTURE for family in FAMILIES.values() if family.gguf is not None))

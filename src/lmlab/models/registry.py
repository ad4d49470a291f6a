"""Every family lmlab builds, reads and writes, in one table: decoders, encoders, encoder-decoders and
the classic models. Each record is defined beside its family's converter or files module
(`models/<family>/family.py`); the loaders dispatch on a directory's `model_type` through `lookup`,
`lmlab.preset` serves the families' presets and `lmlab list --families` shows them."""

from types import ModuleType

from lmlab.errors import LmlabError
from lmlab.models.albert.family import FAMILY as ALBERT
from lmlab.models.bart.family import FAMILY as BART
from lmlab.models.bert.family import FAMILY as BERT
from lmlab.models.deberta.family import FAMILY as DEBERTA
from lmlab.models.electra.family import FAMILY as ELECTRA
from lmlab.models.elmo.family import FAMILY as ELMO
from lmlab.models.family import KINDS, Family, Kind
from lmlab.models.gpt2.family import FAMILY as GPT2
from lmlab.models.llama.family import FAMILY as LLAMA
from lmlab.models.ngram.family import FAMILY as NGRAM
from lmlab.models.rnn.family import FAMILY as RNN
from lmlab.models.roberta.family import FAMILY as ROBERTA
from lmlab.models.seq2seq.family import FAMILY as SEQ2SEQ_RNN
from lmlab.models.t5.family import FAMILY as T5
from lmlab.models.transformer.family import FAMILY as TRANSFORMER
from lmlab.models.window.family import FAMILY as WINDOW
from lmlab.models.word2vec.family import FAMILY as WORD2VEC

FAMILIES: dict[str, Family] = {family.name: family for family in (
    GPT2, LLAMA, BERT, ROBERTA, ALBERT, ELECTRA, DEBERTA, TRANSFORMER, T5, BART,
    NGRAM, WINDOW, RNN, SEQ2SEQ_RNN, ELMO, WORD2VEC)}
_BY_MODEL_TYPE = {family.model_type: family for family in FAMILIES.values()}
assert len(_BY_MODEL_TYPE) == len(FAMILIES), "two families save the same model_type"


def lookup(name: str, source: str = "", kind: Kind | None = None) -> Family:
    """The family called `name` (`cfg.family`) or saving `name` as its model_type (config.json's),
    of `kind` if given. An unknown name is one error listing every model_type lmlab reads and what
    reads it; a family of another kind, one error naming what reads it. `source` (a directory)
    starts the message."""
    family = FAMILIES.get(name) or _BY_MODEL_TYPE.get(name)
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

"""Every training objective by name: what it trains, which tokens it needs, how to build it.

A recipe looks its objective up here instead of branching on names: `choose_objective(family, name)`
checks the name against what the registry holds for the family's kind of model and what the family
trains with, and `build_objective(record, tokenizer, **settings)` binds it into objective(tokens, key)
-> (inputs, targets) (`objectives.objective`). Each objective's algorithm stays in its own module.

A record also carries what the recipe of its kind needs, so the recipe asks the record instead of
branching on the objective's name: a decoder's `batch`, the transformation of a whole batch that
pre-training and perplexity run; an encoder's `head`, the network it trains (objectives sit below
models and losses, so the record names it and `training/encoder_heads.py` builds, trains and saves
it), its `whole_word` masking and its sentence-pair task.

Which family trains with which objective, and which is its default, is the family's own record
(`models/registry.py`: `Family.objective`, `Family.objectives`), not this registry's:
`lmlab list --objectives` shows both.

    name             kind
    causal_lm        decoder
    sft              decoder          (fine-tuning on chats)
    mlm              encoder
    mlm+nsp          encoder
    mlm+sop          encoder
    span             encoder
    rtd              encoder
    span_corruption  encoder-decoder
    denoising        encoder-decoder
    gap_sentences    encoder-decoder
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from lmlab.errors import LmlabError
from lmlab.objectives.causal_lm import causal_lm, causal_lm_objective
from lmlab.objectives.denoising import denoising_objective
from lmlab.objectives.gap_sentences import gap_sentences_objective
from lmlab.objectives.masked_lm import masked_lm_objective
from lmlab.objectives.masking_row import BERT_SPECIAL_TOKENS
from lmlab.objectives.next_sentence import next_sentence_pairs
from lmlab.objectives.objective import Objective
from lmlab.objectives.sentence_order import sentence_order_pairs
from lmlab.objectives.sft import sft_objective
from lmlab.objectives.span_corruption import span_corruption_objective, t5_sentinel_tokens
from lmlab.objectives.span_masking import span_masking_objective
from lmlab.objectives.whole_word import whole_word_objective
from lmlab.tokenizers.encoder_decoder_bpe import MASK


class Trainee(Protocol):
    """What the registry reads of a family (a `models.family.Family`: objectives sit below models, so
    the family is handed in, not looked up)."""

    name: str
    kind: str  # "decoder" | "encoder" | "encoder-decoder" | "classic"
    objective: str  # its default objective; "": none
    objectives: tuple[str, ...]  # the objectives of its kind it can train with; (): all of them


@dataclass(frozen=True)
class ObjectiveRecord:
    """One objective: the model it trains, the tokens it writes or reads, its builder, and what the
    recipe of its kind needs of it, so that no recipe branches on an objective's name."""

    name: str
    kind: str  # "decoder" | "encoder" | "encoder-decoder"
    about: str  # one line, for listings
    build: Callable[..., Objective]  # build(tokenizer, **settings) -> objective(tokens, key) -> (inputs, targets)
    tokens: tuple[str, ...] = ()  # special tokens the tokenizer must hold
    settings: tuple[str, ...] = ()  # the keyword settings `build` takes (from the recipe's flags)
    pretraining: bool = True  # False: it tunes on chats (sft), and no pre-training recipe chooses it
    batch: Callable | None = None  # decoders: block (B, T+1) -> inputs, targets (B, T), every row at once
    head: str = ""  # encoders: the network it trains, a key of `training.encoder_heads.HEADS`
    whole_word: Callable | None = None  # encoders: build(tokenizer) of its whole-word masking; None: none
    pair_task: str | None = None  # encoders: the sentence-pair task ("nsp", "sop") its examples carry
    sentence_pairs: Callable | None = None  # (documents, rng) -> [(A, B, label)], drawn while building the data


REGISTRY = {record.name: record for record in (
    ObjectiveRecord("causal_lm", "decoder", "predict each token from the ones before it (GPT)",
                    causal_lm_objective, batch=causal_lm),
    ObjectiveRecord("sft", "decoder", "causal LM on chats, the loss on the assistant's replies only",
                    sft_objective, settings=("block_size",), pretraining=False),
    ObjectiveRecord("mlm", "encoder", "mask 15 % of the tokens (80/10/10) and predict them (BERT, RoBERTa)",
                    masked_lm_objective, BERT_SPECIAL_TOKENS, head="masked_lm", whole_word=whole_word_objective),
    ObjectiveRecord("mlm+nsp", "encoder", "masked LM + is sentence B the one after A? (BERT)",
                    masked_lm_objective, BERT_SPECIAL_TOKENS, head="masked_lm", whole_word=whole_word_objective,
                    pair_task="nsp", sentence_pairs=next_sentence_pairs),
    ObjectiveRecord("mlm+sop", "encoder", "masked LM + are two consecutive segments in order? (ALBERT)",
                    masked_lm_objective, BERT_SPECIAL_TOKENS, head="masked_lm", whole_word=whole_word_objective,
                    pair_task="sop", sentence_pairs=sentence_order_pairs),
    ObjectiveRecord("span", "encoder", "mask runs of whole words, geometric lengths (SpanBERT)",
                    span_masking_objective, BERT_SPECIAL_TOKENS, head="masked_lm"),
    ObjectiveRecord("rtd", "encoder", "a small MLM generator fills the masks, the model spots its replacements "
                    "(ELECTRA; DeBERTa-v3 with gradient-disentangled embedding sharing)", masked_lm_objective,
                    BERT_SPECIAL_TOKENS, head="replaced_token", whole_word=whole_word_objective),
    ObjectiveRecord("span_corruption", "encoder-decoder", "spans -> sentinels, the decoder writes the spans (T5)",
                    span_corruption_objective, tuple(t5_sentinel_tokens()), settings=("noise",)),
    ObjectiveRecord("denoising", "encoder-decoder", "permute sentences, infill spans with one <mask>; the decoder "
                    "writes the clean text (BART)", denoising_objective, (MASK,)),
    ObjectiveRecord("gap_sentences", "encoder-decoder", "mask the sentences that best summarise the rest; the "
                    "decoder writes them (Pegasus)", gap_sentences_objective, (MASK,)),
)}


def objectives_for(kind: str, family: Trainee | None = None) -> list[ObjectiveRecord]:
    """The objectives that pre-train a model of `kind` (that `family` can train with, when given: its
    default first)."""
    records = [r for r in REGISTRY.values() if r.kind == kind and r.pretraining]
    if family is None:
        return records
    records = [r for r in records if not family.objectives or r.name in (family.objective, *family.objectives)]
    return sorted(records, key=lambda r: r.name != family.objective)


def choose_objective(family: Trainee, name: str | None = None) -> ObjectiveRecord:
    """The pre-training objective `name` (the family's default when None) for a model of `family` (its
    registry record); a name the registry does not hold for its kind, one that does not pre-train, or one
    that the family does not train with, is an error listing the ones it does."""
    kind = family.kind
    if name is None:
        if not family.objective:
            raise LmlabError(f"{family.name} has no default objective; pass --objective "
                             f"({', '.join(r.name for r in objectives_for(kind, family))})")
        name = family.objective
    record = REGISTRY.get(name)
    if record is None or record.kind != kind:
        raise LmlabError(f"objective '{name}' is unknown for {'an' if kind[0] in 'ae' else 'a'} {kind}; choose one "
                         f"of: {', '.join(r.name for r in objectives_for(kind))}")
    if not record.pretraining:
        raise LmlabError(f"objective '{name}' ({record.about}) does not pre-train; choose one of: "
                         f"{', '.join(r.name for r in objectives_for(kind, family))}")
    if record not in objectives_for(kind, family):
        raise LmlabError(f"--objective {name} does not apply to {family.name}; {family.name} trains with: "
                         f"{', '.join(r.name for r in objectives_for(kind, family))}")
    return record


def build_objective(record: ObjectiveRecord, tokenizer, **settings) -> Objective:
    """`record`'s objective bound to `tokenizer` and to those of `settings` it takes (the others are
    the recipe's settings for other objectives): objective(tokens, key) -> (inputs, targets)."""
    return record.build(tokenizer, **{k: v for k, v in settings.items() if k in record.settings})

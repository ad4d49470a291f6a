"""Pre-training an encoder (BERT, RoBERTa, ALBERT, ELECTRA, DeBERTa) on raw text.

Read top to bottom: documents -> a WordPiece tokenizer -> token-id lines -> examples (sentence
pairs with a label for NSP / SOP, or full-sentence rows) -> a training and a held-out part -> for
each step a batch masked by the objective (tokens, whole words or spans; the mask static or
re-drawn every epoch) -> the losses (MLM + NSP/SOP, or replaced-token detection's MLM + 50 * RTD) -> AdamW steps
with checkpoints that resume exactly (`training.loop`) -> an HF-layout model directory with its
heads and tokenizer, which `lmlab.models.load.load_encoder` and transformers read.

Every random choice is a function of the seed and the step or example: pairs are drawn once from
the seed, an example's mask from (seed, example[, epoch]), the generator's samples (RTD) from (seed, step).
"""

import dataclasses
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lmlab.config import EncoderConfig, LoopConfig, TrainConfig
from lmlab.data.corpora import load_corpus
from lmlab.data.segments import document_lines, full_sentence_rows, segments
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.outputs import claim_run_dir
from lmlab.losses.masked_lm import Batch
from lmlab.models import registry
from lmlab.models.family import Family
from lmlab.objectives.dynamic_masking import example_key
from lmlab.objectives.masking_row import BERT_SPECIAL_TOKENS
from lmlab.objectives.next_sentence import pack_pair
from lmlab.objectives.objective import Key, Objective, seeded_generator
from lmlab.objectives.registry import ObjectiveRecord, build_objective, choose_objective
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer
from lmlab.tokenizers.wordpiece import load_wordpiece, train_wordpiece
from lmlab.training import distributed
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.device import training_device
from lmlab.training.encoder_heads import HEADS
from lmlab.training.loop import log_before, measured, part_of, run_steps, start_session
from lmlab.training.post_training import batch_indices, split_examples
from lmlab.training.sharding import decoder_only

DEFAULT_BLOCK = 128  # tokens per example unless --block-size says otherwise

Example = tuple[list[int], list[int], int]  # ids, token types, pair label (-1 without one)


@dataclass(frozen=True)
class EncoderPretrainResult:
    """How a pre-training session ended, and what it measured on held-out examples."""

    step: int
    finished: bool  # False when it stopped early (stop_after, Ctrl-C): resume to finish
    model_dir: Path | None  # the HF-layout model (ELECTRA: the discriminator), when finished
    before: dict  # val_* metrics at step 0
    after: dict  # val_* metrics at the last step


def pretrain_encoder(model_cfg: EncoderConfig, train_cfg: TrainConfig, data: str, out: str | Path,
                     objective: str | None = None, whole_word: bool = False, masking: str | None = None,
                     tokenizer: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
                     device: str = "auto", show_progress: bool = True) -> EncoderPretrainResult:
    """Pre-train an encoder of shape `model_cfg` on `data` (a path or an embedded corpus) into `out`.

    `objective` is an encoder objective of `objectives.registry` the family can train with (default:
    the family's own); its record names the network trained (`training.encoder_heads`). `whole_word` masks
    whole words; `masking` is "static" (BERT) or "dynamic" (RoBERTa, ELECTRA: the defaults of those
    families, and DeBERTa's). `tokenizer` is a WordPiece tokenizer.json or its directory; without one, one of the
    preset's vocabulary size is trained on the data. `stop_after` ends this session after that
    many steps with a checkpoint (so does Ctrl-C); `resume=True` continues it.
    """
    family = registry.lookup(model_cfg.family, kind="encoder")
    record = check_objective(family, objective, whole_word)
    masking = check_masking(masking or family.masking)
    _check_train_config(train_cfg)
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)

    # 1. Text and tokenizer (the run's own tokenizer.json when resuming).
    texts = load_corpus(data)
    tok = _tokenizer(out / TOKENIZER_FILE if ckpt is not None else tokenizer, texts, model_cfg.vocab_size)
    special = {name: tok.token_to_id(name) for name in BERT_SPECIAL_TOKENS}
    cfg = model_cfg.replace(vocab_size=tok.get_vocab_size(), pad_token_id=special["[PAD]"])
    block = block_size(train_cfg, cfg)

    # 2. Examples: sentence pairs with labels, or full-sentence rows; a held-out part.
    examples = build_examples(texts, tok, record, block, special, train_cfg.loop.seed)
    train, val = split_examples(examples, train_cfg.val_fraction, train_cfg.loop.seed)
    val = val[:train_cfg.eval_batches * train_cfg.loop.batch_size]
    # the objective masks one padded row from its key; --whole-word-masking swaps in whole words
    mask = record.whole_word(tok) if whole_word else build_objective(record, tok)

    # 3. Model and session (optimizer, schedule, checkpoint restored when resuming).
    dev = training_device(device)
    torch.manual_seed(train_cfg.loop.seed)
    head = HEADS[record.head]
    model = head.build(cfg, record).to(dev)
    settings = {"recipe": f"{cfg.family} {record.name}", "base_model": None, "base_fingerprint": None,
                "model": dataclasses.asdict(cfg), "objective": record.name, "whole_word_masking": whole_word,
                "masking": masking, "data": data, "data_key": _data_key(examples), "block_size": block,
                } | dataclasses.asdict(train_cfg)
    if ckpt is None and distributed.current().is_main:
        claim_run_dir(out)
        with atomic_path(out / TOKENIZER_FILE) as tmp:
            tok.save(str(tmp))
    session = start_session(out, model, train_cfg.optim, train_cfg.loop, settings, ckpt)

    def losses(rows: list[Example], keys: list[Key], step: int) -> tuple[torch.Tensor, dict]:
        b = masked_batch(rows, keys, mask, special["[PAD]"], dev)
        return head.losses(model, b, record, seeded_generator(train_cfg.loop.seed, step, device=dev))

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        indices, keys = step_examples(len(train), train_cfg.loop, step, part, parts, masking == "dynamic")
        loss, logged = losses([train[i] for i in indices], keys, step)
        return loss, {k: v for k, v in logged.items() if k != "loss"}

    def validate() -> dict:  # held-out examples with fixed masks, so every evaluation sees the same task
        return held_out_metrics(val, len(train), train_cfg.loop, lambda rows, keys: losses(rows, keys, 0)[1])

    if val:
        log_before(session, validate)
    finished = run_steps(session, step_loss, validate if val else None, stop_after, show_progress,
                         ylabel="loss (nats/token)")
    model_dir = head.save(model, out, tok) if finished and session.dist.is_main else None
    before, after = measured(session)
    return EncoderPretrainResult(session.step, finished, model_dir, before, after)


def check_objective(family: Family, objective: str | None, whole_word: bool) -> ObjectiveRecord:
    """The registry's objective to train `family` with (its default when None); one the family
    cannot train with, or whole words asked of one without whole-word masking, is an error."""
    record = choose_objective(family, objective)
    if whole_word and record.whole_word is None:
        raise LmlabError(f"--whole-word-masking with --objective {record.name}: it has no whole-word masking of "
                         f"its own to swap in ({record.about}); drop one")
    return record


def check_masking(masking: str) -> str:
    """`masking` ("static" or "dynamic"), checked."""
    if masking not in ("static", "dynamic"):
        raise LmlabError(f"masking '{masking}' is unknown; use static or dynamic")
    return masking


def block_size(train_cfg: TrainConfig, cfg: EncoderConfig) -> int:
    """Tokens per example: --block-size, or DEFAULT_BLOCK within the model's positions; checked."""
    block = train_cfg.block_size or min(DEFAULT_BLOCK, cfg.max_tokens)
    if not 8 <= block <= cfg.max_tokens:
        raise LmlabError(f"--block-size {block} must be between 8 and the model's {cfg.max_tokens} tokens; "
                         "change --block-size")
    return block


def step_examples(n_train: int, loop: LoopConfig, step: int, part: int, parts: int,
                  dynamic: bool) -> tuple[np.ndarray, list[Key]]:
    """The training examples of part `part` of `parts` of step `step`'s batch, and the key that masks
    each: (seed, example), or with `dynamic` masking (seed, example, epoch), so a new epoch draws new masks."""
    indices = batch_indices(n_train, loop.batch_size, step, loop.seed)
    epochs = (step * loop.batch_size + np.arange(len(indices))) // n_train
    indices, epochs = part_of(indices, part, parts), part_of(epochs, part, parts)
    return indices, [example_key(loop.seed, int(i), int(e) if dynamic else None) for i, e in zip(indices, epochs)]


def held_out_metrics(val: list[Example], n_train: int, loop: LoopConfig,
                     metrics: Callable[[list[Example], list[Key]], dict]) -> dict:
    """The mean of `metrics(rows, keys)` over the held-out examples `val` in batches, each example
    masked by its own fixed key (after the `n_train` training examples'), as val_* metrics."""
    totals = {}
    for start in range(0, len(val), loop.batch_size):
        rows = val[start:start + loop.batch_size]
        keys = [example_key(loop.seed, n_train + start + k) for k in range(len(rows))]
        for key, value in metrics(rows, keys).items():
            totals[key] = totals.get(key, 0.0) + value * len(rows)
    return {f"val_{key}": value / len(val) for key, value in totals.items()}


def masked_batch(rows: list[Example], keys: list[Key], mask: Objective, pad_id: int,
                 device: torch.device) -> Batch:
    """`rows` padded into a batch, each row masked alone by `mask` with its key: ids, inputs, targets,
    attention, types (B, T) and labels (B,), on `device`."""
    ids, attention, types, labels = collate(rows, pad_id)
    pairs = [mask(row, key) for row, key in zip(ids.tolist(), keys)]  # each row as padded, masked alone
    inputs, targets = (torch.from_numpy(np.array(side, dtype=np.int64)) for side in zip(*pairs))  # (B, T) each
    return {name: t.to(device) for name, t in dict(ids=ids, inputs=inputs, targets=targets, attention=attention,
                                                   types=types, labels=labels).items()}


def _check_train_config(cfg: TrainConfig) -> None:
    decoder_only(cfg.loop.fsdp, cfg.max_memory, "encoder pre-training")
    if cfg.compile:
        raise LmlabError("--compile is not supported by encoder pre-training; drop it")


def _tokenizer(path: str | Path | None, texts: list[str], vocab_size: int):
    """The tokenizer at `path`, or a WordPiece trained on `texts`; it must have BERT's special tokens."""
    if path is None:
        tok = train_wordpiece(texts, vocab_size)
    else:
        # a BERT model directory may hold only a vocab.txt, which load_wordpiece reads
        tok = load_wordpiece(path, 1) if Path(path).is_dir() else load_tokenizer(path)
    missing = [name for name in BERT_SPECIAL_TOKENS if tok.token_to_id(name) is None]
    if missing:
        raise LmlabError(f"tokenizer '{path}' lacks {missing}; encoder pre-training needs a WordPiece tokenizer "
                         "with BERT's special tokens (leave out --tokenizer to train one)")
    tok.no_padding()
    tok.no_truncation()
    return tok


def build_examples(texts: list[str], tokenizer, objective: ObjectiveRecord, block: int, special: dict[str, int],
                   seed: int) -> list[Example]:
    """The training examples of `objective`: "[CLS] A [SEP] B [SEP]" pairs with their NSP / SOP
    label, or "[CLS] row [SEP]" full-sentence rows (label -1), each at most `block` tokens."""
    documents = document_lines(texts, tokenizer)
    cls, sep = special["[CLS]"], special["[SEP]"]
    if objective.sentence_pairs is not None:
        segmented = [segments(doc, (block - 3) // 2) for doc in documents]
        pairs = objective.sentence_pairs(segmented, random.Random(seed))
        return [(*pack_pair(a, b, cls, sep, block), label) for a, b, label in pairs]
    rows = full_sentence_rows(documents, block - 2, sep)
    return [([cls, *row, sep], [0] * (len(row) + 2), -1) for row in rows]


def collate(rows: list[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids, attention mask, token types (B, T), right-padded to the longest row, and labels (B,)."""
    T = max(len(ids) for ids, _, _ in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), T), dtype=torch.long)
    types = torch.zeros((len(rows), T), dtype=torch.long)
    for i, (row, row_types, _) in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        types[i, :len(row)] = torch.tensor(row_types)
        attention[i, :len(row)] = 1
    return ids, attention, types, torch.tensor([label for _, _, label in rows])


def _data_key(examples: list[Example]) -> str:
    """A short hash of the examples (ids, types, labels): a resumed run must train on the same data."""
    digest = hashlib.sha256()
    for ids, types, label in examples:
        digest.update(np.asarray([len(ids), label, *ids, *types], dtype=np.int64).tobytes())
    return digest.hexdigest()[:16]

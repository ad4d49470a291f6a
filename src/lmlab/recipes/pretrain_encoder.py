"""Pre-training an encoder (BERT, RoBERTa, ALBERT, ELECTRA) on raw text.

Read top to bottom: documents -> a WordPiece tokenizer -> token-id lines -> examples (sentence
pairs with a label for NSP / SOP, or full-sentence rows) -> a training and a held-out part -> for
each step a batch masked by the objective (tokens, whole words or spans; the mask static or
re-drawn every epoch) -> the losses (MLM + NSP/SOP, or ELECTRA's MLM + 50 * RTD) -> AdamW steps
with checkpoints that resume exactly (`training.loop`) -> an HF-layout model directory with its
heads and tokenizer, which `lmlab.models.load.load_encoder` and transformers read.

Every random choice is a function of the seed and the step or example: pairs are drawn once from
the seed, an example's mask from (seed, example[, epoch]), ELECTRA's samples from (seed, step).
"""

import dataclasses
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lmlab.config import EncoderConfig, TrainConfig
from lmlab.data.corpora import load_corpus
from lmlab.data.segments import document_lines, full_sentence_rows, segments
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.models.encoder_files import save_electra_dirs, save_pretraining_dir
from lmlab.models.pretraining import build_electra_for_pretraining, build_for_pretraining
from lmlab.targets import IGNORE_INDEX
from lmlab.objectives.dynamic_masking import example_generator, mask_each, seeded_generator
from lmlab.objectives.masked_lm import masked_lm
from lmlab.objectives.next_sentence import next_sentence_pairs, pack_pair
from lmlab.objectives.replaced_token import RTD_WEIGHT, replace_with_samples
from lmlab.objectives.sentence_order import sentence_order_pairs
from lmlab.objectives.span_masking import span_masked_lm
from lmlab.objectives.whole_word import continuation_table, whole_word_masked_lm
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer
from lmlab.tokenizers.wordpiece import load_wordpiece, train_wordpiece
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.device import training_device
from lmlab.training.finetune import batch_indices, split_examples
from lmlab.training.loop import evaluated, measured, run_steps, start_session

# The objectives each family trains with; the first is its default.
FAMILY_OBJECTIVES = {
    "bert": ("mlm+nsp", "mlm", "mlm+sop", "span"),
    "roberta": ("mlm", "span"),  # RoBERTa dropped the sentence-pair task, and has no pooler for one
    "albert": ("mlm+sop", "mlm", "mlm+nsp", "span"),
    "electra": ("rtd",),
}
PAIR_OBJECTIVES = {"mlm+nsp": next_sentence_pairs, "mlm+sop": sentence_order_pairs}
DEFAULT_BLOCK = 128  # tokens per example unless --block-size says otherwise
NEEDED_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")

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

    `objective` is one of the family's FAMILY_OBJECTIVES (default: its first); `whole_word` masks
    whole words; `masking` is "static" (BERT) or "dynamic" (RoBERTa, ELECTRA: the defaults of those
    families). `tokenizer` is a WordPiece tokenizer.json or its directory; without one, one of the
    preset's vocabulary size is trained on the data. `stop_after` ends this session after that
    many steps with a checkpoint (so does Ctrl-C); `resume=True` continues it.
    """
    objective = check_objective(model_cfg.family, objective, whole_word)
    masking = masking or ("dynamic" if model_cfg.family in ("roberta", "electra") else "static")
    if masking not in ("static", "dynamic"):
        raise LmlabError(f"masking '{masking}' is unknown; use static or dynamic")
    _check_train_config(train_cfg)
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)

    # 1. Text and tokenizer (the run's own tokenizer.json when resuming).
    texts = load_corpus(data)
    tok = _tokenizer(out / TOKENIZER_FILE if ckpt is not None else tokenizer, texts, model_cfg.vocab_size)
    special = {name: tok.token_to_id(name) for name in NEEDED_TOKENS}
    cfg = model_cfg.replace(vocab_size=tok.get_vocab_size(), pad_token_id=special["[PAD]"])
    block = train_cfg.block_size or min(DEFAULT_BLOCK, cfg.max_tokens)
    if not 8 <= block <= cfg.max_tokens:
        raise LmlabError(f"--block-size {block} must be between 8 and the model's {cfg.max_tokens} tokens; "
                         "change --block-size")

    # 2. Examples: sentence pairs with labels, or full-sentence rows; a held-out part.
    examples = build_examples(texts, tok, objective, block, special, train_cfg.seed)
    train, val = split_examples(examples, train_cfg.val_fraction, train_cfg.seed)
    val = val[:train_cfg.eval_batches * train_cfg.batch_size]
    mask = masking_function(objective, whole_word, special["[MASK]"], cfg.vocab_size)
    continuation = continuation_table(tok.get_vocab())
    special_ids = torch.tensor(list(special.values()))

    # 3. Model and session (optimizer, schedule, checkpoint restored when resuming).
    dev = training_device(device)
    torch.manual_seed(train_cfg.seed)
    model = (build_electra_for_pretraining(cfg) if objective == "rtd" else
             build_for_pretraining(cfg, sentence_pair=objective in PAIR_OBJECTIVES)).to(dev)
    settings = {"recipe": f"{cfg.family} {objective}", "base_model": None, "base_fingerprint": None,
                "model": dataclasses.asdict(cfg), "objective": objective, "whole_word_masking": whole_word,
                "masking": masking, "data": data, "data_key": _data_key(examples), "block_size": block,
                } | dataclasses.asdict(train_cfg)
    if ckpt is None:
        with atomic_path(out / TOKENIZER_FILE) as tmp:
            tok.save(str(tmp))
    session = start_session(out, model, train_cfg, settings, ckpt)

    def batch(rows: list[Example], generators: list[torch.Generator]) -> dict[str, torch.Tensor]:
        ids, attention, types, labels = collate(rows, special["[PAD]"])
        masked_special = torch.isin(ids, special_ids) | (attention == 0)
        inputs, targets = mask_each(mask, (ids, masked_special, continuation[ids]), generators)
        return {name: t.to(dev) for name, t in dict(ids=ids, inputs=inputs, targets=targets, attention=attention,
                                                      types=types, labels=labels).items()}

    def losses(b: dict[str, torch.Tensor], step: int) -> tuple[torch.Tensor, dict]:
        if objective == "rtd":
            return electra_losses(model, b, seeded_generator(train_cfg.seed, step, device=dev))
        return encoder_losses(model, b, objective)

    def step_loss(step: int) -> tuple[torch.Tensor, dict]:
        indices = batch_indices(len(train), train_cfg.batch_size, step, train_cfg.seed)
        epochs = (step * train_cfg.batch_size + np.arange(len(indices))) // len(train)
        generators = [example_generator(train_cfg.seed, i, int(e) if masking == "dynamic" else None)
                      for i, e in zip(indices, epochs)]
        loss, logged = losses(batch([train[i] for i in indices], generators), step)
        return loss, {k: v for k, v in logged.items() if k != "loss"}

    def validate() -> dict:  # held-out examples with fixed masks, so every evaluation sees the same task
        totals = {}
        for start in range(0, len(val), train_cfg.batch_size):
            rows = val[start:start + train_cfg.batch_size]
            generators = [example_generator(train_cfg.seed, len(train) + start + k) for k in range(len(rows))]
            _, logged = losses(batch(rows, generators), 0)
            for key, value in logged.items():
                totals[key] = totals.get(key, 0.0) + value * len(rows)
        return {f"val_{key}": value / len(val) for key, value in totals.items()}

    if not session.resumed and val:
        session.metrics.write(step=0, **evaluated(model, validate))
    finished = run_steps(session, step_loss, validate if val else None, stop_after, show_progress,
                         ylabel="loss (nats/token)")
    model_dir = None
    if finished:
        model_dir = out / "model"
        if objective == "rtd":
            save_electra_dirs(model, model_dir, out / "generator", tok)
        else:
            save_pretraining_dir(model, model_dir, tok)
    before, after = measured(session)
    return EncoderPretrainResult(session.step, finished, model_dir, before, after)


def check_objective(family: str, objective: str | None, whole_word: bool) -> str:
    """The objective to train `family` with (its default when None); an unsupported one is an error."""
    supported = FAMILY_OBJECTIVES[family]
    objective = objective or supported[0]
    if objective not in supported:
        raise LmlabError(f"--objective {objective} does not apply to {family}; {family} trains with: "
                         f"{', '.join(supported)}")
    if whole_word and objective == "span":
        raise LmlabError("--whole-word-masking with --objective span: span masking already masks whole words; "
                         "drop one")
    return objective


def _check_train_config(cfg: TrainConfig) -> None:
    unsupported = {"grad_accum": 1, "bf16": False, "compile": False}
    for name, value in unsupported.items():
        if getattr(cfg, name) != value:
            raise LmlabError(f"{name}={getattr(cfg, name)} is not supported by encoder pre-training; drop it")


def _tokenizer(path: str | Path | None, texts: list[str], vocab_size: int):
    """The tokenizer at `path`, or a WordPiece trained on `texts`; it must have BERT's special tokens."""
    if path is None:
        tok = train_wordpiece(texts, vocab_size)
    else:
        # a BERT model directory may hold only a vocab.txt, which load_wordpiece reads
        tok = load_wordpiece(path, 1) if Path(path).is_dir() else load_tokenizer(path)
    missing = [name for name in NEEDED_TOKENS if tok.token_to_id(name) is None]
    if missing:
        raise LmlabError(f"tokenizer '{path}' lacks {missing}; encoder pre-training needs a WordPiece tokenizer "
                         "with BERT's special tokens (leave out --tokenizer to train one)")
    tok.no_padding()
    tok.no_truncation()
    return tok


def build_examples(texts: list[str], tokenizer, objective: str, block: int, special: dict[str, int],
                   seed: int) -> list[Example]:
    """The training examples of `objective`: "[CLS] A [SEP] B [SEP]" pairs with their NSP / SOP
    label, or "[CLS] row [SEP]" full-sentence rows (label -1), each at most `block` tokens."""
    documents = document_lines(texts, tokenizer)
    cls, sep = special["[CLS]"], special["[SEP]"]
    if objective in PAIR_OBJECTIVES:
        segmented = [segments(doc, (block - 3) // 2) for doc in documents]
        pairs = PAIR_OBJECTIVES[objective](segmented, random.Random(seed))
        return [(*pack_pair(a, b, cls, sep, block), label) for a, b, label in pairs]
    rows = full_sentence_rows(documents, block - 2, sep)
    return [([cls, *row, sep], [0] * (len(row) + 2), -1) for row in rows]


def masking_function(objective: str, whole_word: bool, mask_id: int,
                     vocab_size: int) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """mask(ids, special, continuation, generator=g) -> (inputs, targets) for the objective."""
    if objective == "span":
        return partial(span_masked_lm, mask_id=mask_id, vocab_size=vocab_size)
    if whole_word:
        return partial(whole_word_masked_lm, mask_id=mask_id, vocab_size=vocab_size)
    return lambda ids, special, continuation, generator: masked_lm(ids, special, mask_id, vocab_size, generator)


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


def encoder_losses(model: nn.Module, b: dict[str, torch.Tensor], objective: str) -> tuple[torch.Tensor, dict]:
    """MLM loss over the masked positions (+ the sentence-pair loss), and their accuracies."""
    hidden = model(b["inputs"], b["attention"], b["types"])  # (B, T, C)
    chosen = b["targets"] != IGNORE_INDEX
    mlm_loss, logged = _mlm(model.mlm_logits(hidden[chosen]), b["targets"][chosen])
    if objective not in PAIR_OBJECTIVES:
        return mlm_loss, logged | {"loss": mlm_loss.item()}
    name = objective.removeprefix("mlm+")  # nsp or sop
    logits = model.pair_logits(hidden)  # (B, 2)
    pair_loss = F.cross_entropy(logits, b["labels"])
    loss = mlm_loss + pair_loss
    return loss, logged | {"loss": loss.item(), f"{name}_loss": pair_loss.item(),
                           f"{name}_acc": (logits.argmax(-1) == b["labels"]).float().mean().item()}


def electra_losses(model: nn.Module, b: dict[str, torch.Tensor],
                   generator: torch.Generator) -> tuple[torch.Tensor, dict]:
    """ELECTRA: the generator's MLM loss + RTD_WEIGHT * the discriminator's replaced-token loss."""
    chosen = b["targets"] != IGNORE_INDEX
    logits = model.generator_logits(model.generator(b["inputs"], b["attention"], b["types"])[chosen])  # (N, V)
    mlm_loss, logged = _mlm(logits, b["targets"][chosen])
    inputs, replaced = replace_with_samples(b["ids"], chosen, logits, generator)  # no gradient through sampling
    real = b["attention"].bool()
    rtd = model.rtd_logits(inputs, b["attention"], b["types"])[real]  # (n_real,)
    rtd_loss = F.binary_cross_entropy_with_logits(rtd, replaced[real])
    loss = mlm_loss + RTD_WEIGHT * rtd_loss
    return loss, logged | {"loss": loss.item(), "rtd_loss": rtd_loss.item(),
                           "rtd_acc": ((rtd > 0).float() == replaced[real]).float().mean().item(),
                           "replaced": replaced[real].mean().item()}


def _mlm(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Cross-entropy and accuracy of logits (N, V) against targets (N,); 0 when nothing was masked."""
    if targets.numel() == 0:
        return logits.sum() * 0.0, {"mlm_loss": 0.0, "mlm_acc": 0.0}
    loss = F.cross_entropy(logits, targets)
    return loss, {"mlm_loss": loss.item(), "mlm_acc": (logits.argmax(-1) == targets).float().mean().item()}


def _data_key(examples: list[Example]) -> str:
    """A short hash of the examples (ids, types, labels): a resumed run must train on the same data."""
    digest = hashlib.sha256()
    for ids, types, label in examples:
        digest.update(np.asarray([len(ids), label, *ids, *types], dtype=np.int64).tobytes())
    return digest.hexdigest()[:16]

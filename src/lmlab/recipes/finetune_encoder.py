"""Fine-tuning a BERT encoder on a task: the recipe of Devlin et al. (2018), section 4.

Read top to bottom: examples (a CSV/JSONL file per split, or the embedded sentiment task) -> the
encoder (a preset trained from scratch, a zoo name, an HF BERT directory, an lmlab run) and its
tokenizer -> the task's head on top (`lmlab.heads`) -> token ids once -> epochs of shuffled
batches: head loss, backward, gradient clipping, AdamW, learning rate warmed up linearly then
decayed linearly to 0 -> after each epoch the task's metric on the evaluation set; the best
model so far is kept, and training stops early after `patience` epochs without improvement.

The result, `out/model`, is an HF BERT directory (config.json, model.safetensors, tokenizer.json)
plus `head.safetensors` and `task.json` (task, labels, lengths, the best scores); `load_finetuned`
reads it back to predict. Checkpoints (model, optimizer, schedule, step, RNGs, early-stopping
state) make a stopped run resume exactly; metrics.jsonl, loss.png and eval.png show the run.
"""

import dataclasses
import hashlib
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch import nn

from lmlab.config import ENCODER_PRESETS
from lmlab.models.presets import preset
from lmlab.config_checks import MAX_BATCH, MAX_CONTEXT, MAX_SEED, at_least, at_most, check_types, fraction, positive
from lmlab.data.encoder_batches import Features, collate, encode_examples
from lmlab.data.encoder_tasks import (DEFAULT_COLUMNS, EMBEDDED_TASKS, Columns, Example, check_choice_counts,
                                      check_labels, embedded_examples, label_names, read_examples)
from lmlab.errors import LmlabError
from lmlab.eval.entity_f1 import entity_f1
from lmlab.eval.metrics import accuracy, f1_scores, matthews_correlation, pearson, spearman
from lmlab.eval.qa_metrics import exact_match, token_f1
from lmlab.heads.multiple_choice import MultipleChoice
from lmlab.heads.regression import SequenceRegressor, regression_loss
from lmlab.heads.sequence_classification import SequenceClassifier, classification_loss
from lmlab.heads.span_extraction import SpanExtractor, best_spans, span_loss
from lmlab.heads.token_classification import TokenClassifier, tagging_loss
from lmlab.io.atomic import atomic_path, atomic_write_text
from lmlab.models.encoder_files import save_hf_encoder_dir
from lmlab.models.load import load_encoder
from lmlab.models.bert.build import build_encoder
from lmlab.models.bert.model import BertEncoder
from lmlab.modules.pooling import ClsPooler
from lmlab.tokenizers.wordpiece import load_wordpiece, train_wordpiece
from lmlab.training.checkpoint import resume_checkpoint, save_checkpoint, set_rng_state, setting_differences
from lmlab.training.device import pick_device, training_device
from lmlab.training.finetune import split_examples
from lmlab.training.interrupt import sigint_flag
from lmlab.training.optim import build_optimizer, lr_multiplier
from lmlab.progress import progress_bar
from lmlab.training.progress import MetricsLog, save_loss_curve

HEAD_FILE = "head.safetensors"
TASK_FILE = "task.json"
SCRATCH_VOCAB_SIZE = 8000  # WordPiece trained on the training texts when the encoder starts from a preset
RESUMABLE = frozenset({"log_every"})  # settings a resumed run may change


class TruncationWarning(UserWarning):
    """Some inputs were longer than --max-length and were cut."""


@dataclass(frozen=True)
class EncoderFinetuneConfig:
    """Everything about an encoder fine-tuning run except the model, the data and the output directory."""

    epochs: int = 3
    batch_size: int = 32
    lr: float = 5e-5  # BERT's range is 2e-5 to 5e-5; an encoder trained from scratch wants ~1e-3
    warmup_ratio: float = 0.1  # share of the steps over which the learning rate rises from 0
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    max_length: int = 128  # tokens per input, [CLS] and [SEP] included
    patience: int = 2  # epochs without a better evaluation score before stopping
    dropout: float = 0.1  # before the head's linear layer
    max_answer_length: int = 30  # qa: tokens in a predicted answer at most
    truncate: bool = True  # cut inputs over max_length (with a warning) rather than refuse them
    eval_fraction: float = 0.1  # without an evaluation file: share of the training examples held out
    seed: int = 0
    log_every: int = 10

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "epochs", "batch_size", "max_length", "patience", "max_answer_length", "log_every")
        at_least(self, 0, "weight_decay", "seed")
        at_most(self, MAX_CONTEXT, "max_length", "max_answer_length")
        at_most(self, MAX_BATCH, "batch_size")
        at_most(self, MAX_SEED, "seed")
        positive(self, "lr", "grad_clip", "eval_fraction")
        fraction(self, "warmup_ratio")
        fraction(self, "dropout")
        fraction(self, "eval_fraction")


@dataclass(frozen=True)
class TaskSpec:
    """What differs between tasks: the head, its loss, and the score early stopping watches (higher is better)."""

    head: Callable[[BertEncoder, int, EncoderFinetuneConfig], nn.Module]  # (encoder, n_labels, cfg) -> head
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    metric: str
    pooled: bool  # the head reads the [CLS] pooler


def _classifier(encoder, n_labels, cfg):
    return SequenceClassifier(encoder, n_labels, cfg.dropout)


TASK_SPECS = {
    "classify": TaskSpec(_classifier, classification_loss, "accuracy", True),
    "pair": TaskSpec(_classifier, classification_loss, "accuracy", True),
    "regress": TaskSpec(lambda encoder, _, cfg: SequenceRegressor(encoder, cfg.dropout), regression_loss,
                        "pearson", True),
    "tag": TaskSpec(lambda encoder, n, cfg: TokenClassifier(encoder, n, cfg.dropout), tagging_loss, "entity_f1", False),
    "qa": TaskSpec(lambda encoder, _, cfg: SpanExtractor(encoder), span_loss, "f1", False),
    "choice": TaskSpec(lambda encoder, _, cfg: MultipleChoice(encoder, cfg.dropout), classification_loss,
                       "accuracy", True),
}


@dataclass
class FinetunedEncoder:
    """A fine-tuned encoder and its head, ready to predict (`predict`)."""

    head: nn.Module  # the encoder is head.encoder
    tokenizer: Tokenizer
    task: str
    labels: list[str]  # label names (classify, pair) or tags (tag); [] otherwise
    max_length: int
    max_answer_length: int

    @property
    def device(self) -> torch.device:
        return next(self.head.parameters()).device

    @torch.no_grad()
    def predict(self, examples: list[Example], batch_size: int = 64, truncate: bool = True) -> list:
        """One prediction per example: a label name (classify, pair), a score (regress), one tag per word
        (tag), the answer text (qa) or the index of the chosen answer (choice). Targets are not read."""
        features = encode_examples(self.task, self.tokenizer, examples, self.max_length, self.labels, truncate)
        return predict_features(self, examples, features, batch_size)


@dataclass(frozen=True)
class EncoderFinetuneResult:
    step: int
    finished: bool  # False when stopped early by stop_after or Ctrl-C: resume to finish
    stopped_early: bool  # the evaluation score stopped improving (patience ran out)
    metric: str
    before: dict  # evaluation scores before training
    best: dict  # evaluation scores of the kept model
    best_epoch: int
    model_dir: Path | None


def finetune_encoder(model: str, task: str, train: str, out: str | Path, eval_data: str | None = None,
                     cfg: EncoderFinetuneConfig = EncoderFinetuneConfig(), columns: Columns | None = None,
                     tokenizer: str | None = None, resume: bool = False, stop_after: int | None = None,
                     device: str = "auto", show_progress: bool = True) -> EncoderFinetuneResult:
    """Fine-tune encoder `model` on `task` with the examples of `train` (a CSV/JSONL file, or an embedded
    task name: `sentiment`) and evaluate each epoch on `eval_data` (a file; default: a held-out part of
    the training data, or the embedded task's own evaluation set). `tokenizer` (a tokenizer.json or a
    directory) replaces the model's. Stops after `stop_after` steps this session when given."""
    if task not in TASK_SPECS:
        raise LmlabError(f"unknown task '{task}'; choose one of: {', '.join(TASK_SPECS)}")
    out, spec = Path(out), TASK_SPECS[task]
    ckpt = resume_checkpoint(out, resume)
    train_examples, eval_examples = load_splits(task, train, eval_data, columns or DEFAULT_COLUMNS[task], cfg)
    labels = label_names(train_examples, task)
    check_labels(eval_examples, labels, task, eval_data or train)
    dev = training_device(device)
    if ckpt is not None:  # the run's own tokenizer: one trained from scratch must not be retrained
        tokenizer = str(out / "tokenizer.json")
    encoder, tok, source = starting_encoder(model, tokenizer, _texts(train_examples), cfg.seed)
    if cfg.max_length > encoder.config.context_length:
        raise LmlabError(f"--max-length {cfg.max_length} exceeds the model's {encoder.config.context_length} "
                         "positions; lower --max-length")
    if spec.pooled and encoder.pooler is None:  # e.g. an MLM checkpoint: a fresh pooler, as HF adds one
        encoder.pooler = ClsPooler(encoder.config.d_model)
        encoder.config = encoder.config.replace(pooler=True)
    torch.manual_seed(cfg.seed)
    head = spec.head(encoder, len(labels), cfg).to(dev)
    tuned = FinetunedEncoder(head, tok, task, labels, cfg.max_length, cfg.max_answer_length)
    train_features = _encoded(tuned, train_examples, cfg, train)
    eval_features = _encoded(tuned, eval_examples, cfg, eval_data or train)
    trainable = [i for i, target in enumerate(train_features.targets) if target is not None]  # qa: answer kept

    settings = {"recipe": "finetune_encoder", "model": source, "task": task, "train": train, "eval": eval_data,
                "data_key": _data_key(train_examples, eval_examples), "labels": labels} | dataclasses.asdict(cfg)
    steps_per_epoch = math.ceil(len(trainable) / cfg.batch_size)
    total = cfg.epochs * steps_per_epoch
    optimizer = build_optimizer(head, cfg.lr, cfg.weight_decay, betas=(0.9, 0.999))
    warmup = round(cfg.warmup_ratio * total)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_multiplier(s, warmup, total, "linear", 0.0))
    step, state = 0, {"best": None, "best_epoch": 0, "best_scores": {}, "bad_epochs": 0, "stopped_early": False}
    if ckpt is not None:
        _check_same_run(ckpt["settings"], settings, out)
        head.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"])
        step, state = ckpt["step"], ckpt["state"]
    else:
        out.mkdir(parents=True, exist_ok=True)
        tok.save(str(out / "tokenizer.json"))
    atomic_write_text(out / "run.json", json.dumps(settings, indent=2))
    metrics = MetricsLog(out / "metrics.jsonl", resume_step=step if ckpt is not None else None)

    def evaluate() -> dict:
        head.eval()
        scores = task_scores(task, eval_examples, predict_features(tuned, eval_examples, eval_features))
        head.train()
        return {f"eval_{name}": value for name, value in scores.items()}

    def save_checkpoint_now() -> None:
        save_checkpoint(out / "checkpoints", step, {"model": head.state_dict(), "optimizer": optimizer.state_dict(),
                                                    "scheduler": scheduler.state_dict(), "settings": settings,
                                                    "state": state}, keep=2)

    if ckpt is None:
        metrics.write(step=0, epoch=0, **evaluate())
    end = total if stop_after is None else min(total, step + stop_after)
    bar = progress_bar(total, step, desc=f"finetune {task}", disable=not show_progress)
    head.train()
    with sigint_flag() as interrupted:
        while step < end and not state["stopped_early"] and not interrupted():
            epoch, position = divmod(step, steps_per_epoch)
            order = epoch_order(len(trainable), cfg.seed, epoch)[position * cfg.batch_size:][:cfg.batch_size]
            batch = {k: v.to(dev) for k, v in collate(train_features, [trainable[i] for i in order]).items()}
            outputs = head(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            loss = spec.loss(outputs, batch["targets"])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step += 1
            row = {"step": step, "epoch": step / steps_per_epoch, "loss": loss.item(),
                   "lr": scheduler.get_last_lr()[0]}
            if step % steps_per_epoch == 0:
                row |= evaluate()
                keep_best(_eval_part(row), spec.metric, step // steps_per_epoch, state, cfg.patience,
                             lambda: save_finetuned(tuned, out / "model", row))
            if step % cfg.log_every == 0 or step % steps_per_epoch == 0 or step == end:
                metrics.write(**row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", refresh=False)
            bar.update(1)
            if step % steps_per_epoch == 0 and step < end:
                save_checkpoint_now()
    bar.close()
    save_checkpoint_now()
    rows = metrics.read()
    save_loss_curve(rows, out / "loss.png", {"train loss": "loss"})
    save_loss_curve(rows, out / "eval.png", {f"eval {spec.metric}": f"eval_{spec.metric}"}, ylabel=spec.metric)
    finished = step >= total or state["stopped_early"]
    stopped_early = state["stopped_early"] and step < total
    return EncoderFinetuneResult(step, finished, stopped_early, spec.metric, _eval_part(rows[0]),
                                 state["best_scores"], state["best_epoch"], out / "model" if finished else None)


def keep_best(scores: dict, metric: str, epoch: int, state: dict, patience: int,
                 save_best: Callable[[], None]) -> None:
    """Early stopping: keep the model when `scores[metric]` beats the best so far, else count a bad
    epoch; after `patience` bad epochs in a row, stop."""
    if state["best"] is None or scores[metric] > state["best"]:
        state.update(best=scores[metric], best_epoch=epoch, best_scores=scores, bad_epochs=0)
        save_best()
    else:
        state["bad_epochs"] += 1
        state["stopped_early"] = state["bad_epochs"] >= patience


def _eval_part(row: dict) -> dict:
    return {k.removeprefix("eval_"): v for k, v in row.items() if k.startswith("eval_")}


def _check_same_run(saved: dict, settings: dict, out: Path) -> None:
    diffs = setting_differences(saved, settings, RESUMABLE)
    if diffs:
        raise LmlabError(f"--resume with different settings ({'; '.join(diffs)}); rerun with the original "
                         f"settings or choose a new --out than '{out}'")


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled order of the n training examples in `epoch`: a pure function of (seed, epoch)."""
    return np.random.default_rng((seed, epoch)).permutation(n)


def load_splits(task: str, train: str, eval_data: str | None, columns: Columns, cfg: EncoderFinetuneConfig
                ) -> tuple[list[Example], list[Example]]:
    """(training, evaluation) examples: from files, from an embedded task, or a file split in two."""
    if train in EMBEDDED_TASKS and not Path(train).exists():
        if EMBEDDED_TASKS[train] != task:
            raise LmlabError(f"the embedded data '{train}' is a '{EMBEDDED_TASKS[train]}' task, not '{task}'; "
                             f"pass --task {EMBEDDED_TASKS[train]}")
        train_examples, eval_examples = embedded_examples(train, cfg.seed)
    else:
        if not Path(train).is_file():
            raise LmlabError(f"training data '{train}' not found; pass a CSV/JSONL file or an embedded task: "
                             f"{', '.join(EMBEDDED_TASKS)}")
        train_examples = read_examples(train, task, columns)
        eval_examples = None
    if eval_data is not None:
        eval_examples = read_examples(eval_data, task, columns)
    elif eval_examples is None:
        if len(train_examples) < 2:
            raise LmlabError(f"'{train}' holds {len(train_examples)} example; pass --eval or more examples")
        train_examples, eval_examples = split_examples(train_examples, cfg.eval_fraction, cfg.seed)
    if task == "choice":
        check_choice_counts(train_examples, train)
        check_choice_counts(eval_examples, eval_data or train)
    return train_examples, eval_examples


def starting_encoder(model: str, tokenizer: str | None, texts: list[str], seed: int
                     ) -> tuple[BertEncoder, Tokenizer, str]:
    """(encoder, tokenizer, what to call the model): a preset with fresh weights and a WordPiece trained
    on `texts` (unless `tokenizer` is given), or a trained encoder (zoo name, HF BERT directory, a run
    directory holding model/). A tokenizer with more tokens than the model's vocabulary is refused."""
    if model in ENCODER_PRESETS and not Path(model).exists():
        tok = _read_tokenizer(tokenizer, 512) if tokenizer else train_wordpiece(texts, SCRATCH_VOCAB_SIZE)
        torch.manual_seed(seed)
        encoder = build_encoder(preset(model, vocab_size=tok.get_vocab_size()))
        source = model
    else:
        path = Path(model)
        if (path / "model" / "config.json").is_file():
            path = path / "model"
        encoder, tok = load_encoder(path)
        if tokenizer:
            tok = _read_tokenizer(tokenizer, encoder.config.context_length)
        source = str(path.resolve()) if path.exists() else model
    if tok.get_vocab_size() > encoder.config.vocab_size:
        raise LmlabError(f"the tokenizer has {tok.get_vocab_size()} tokens but the model's vocabulary has "
                         f"{encoder.config.vocab_size}; use the tokenizer the model was trained with")
    return encoder, tok, source


def _read_tokenizer(path: str, max_length: int) -> Tokenizer:
    path = Path(path)
    if path.is_dir():
        return load_wordpiece(path, max_length)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises plain Exceptions for unreadable files
        raise LmlabError(f"cannot read tokenizer '{path}' ({e}); pass a tokenizer.json or its directory") from None


def _texts(examples: list[Example]) -> list[str]:
    """All the text of the examples, for training a tokenizer from scratch."""
    texts = []
    for e in examples:
        texts.append(" ".join(e.text) if isinstance(e.text, list) else e.text)
        if e.pair is not None:
            texts.append(" ".join(e.pair) if isinstance(e.pair, list) else e.pair)
    return texts


def _encoded(tuned: FinetunedEncoder, examples: list[Example], cfg: EncoderFinetuneConfig, path) -> Features:
    features = encode_examples(tuned.task, tuned.tokenizer, examples, cfg.max_length, tuned.labels, cfg.truncate, path)
    if features.truncated:
        warnings.warn(f"{path}: {len(features.truncated)} of {len(examples)} examples are longer than "
                      f"--max-length {cfg.max_length} tokens and were cut (first at line {features.truncated[0]}); "
                      "raise --max-length, or pass --no-truncate to refuse them", TruncationWarning, stacklevel=2)
    return features


def _data_key(*splits: list[Example]) -> str:
    """A short hash of the examples: a resumed run must train and evaluate on the same data."""
    text = json.dumps([[dataclasses.astuple(e) for e in split] for split in splits])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@torch.no_grad()
def predict_features(tuned: FinetunedEncoder, examples: list[Example], features: Features,
                     batch_size: int = 64) -> list:
    """The predictions for encoded `examples` (see `FinetunedEncoder.predict`), batched by length."""
    head = tuned.head
    training = head.training
    head.eval()
    predictions = [None] * len(examples)
    for indices, batch, outputs in batched_outputs(tuned, features, batch_size):
        for row, i in enumerate(indices):
            predictions[i] = _prediction(tuned, examples[i], features, i, outputs, row, batch)
    head.train(training)
    return predictions


def batched_outputs(tuned: FinetunedEncoder, features: Features, batch_size: int = 64):
    """The head's outputs on every encoded example, in batches of similar lengths (little padding):
    yields (example indices, the batch on the head's device, the head's outputs)."""
    order = sorted(range(len(features.ids)), key=lambda i: len(features.ids[i]))
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch = {k: v.to(tuned.device) for k, v in collate(features, indices).items()}
        yield indices, batch, tuned.head(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])


def _prediction(tuned: FinetunedEncoder, example: Example, features: Features, i: int, outputs, row: int, batch):
    task = tuned.task
    if task in ("classify", "pair"):
        return tuned.labels[int(outputs[row].argmax())]
    if task == "regress":
        return float(outputs[row])
    if task == "choice":
        return int(outputs[row].argmax())
    if task == "tag":
        tags = [tuned.labels[int(outputs[row, t].argmax())] for t in features.word_starts[i]]
        return tags + ["O"] * (len(example.text) - len(tags))  # words cut by truncation: outside any entity
    start, end = outputs
    context = torch.tensor(features.in_context[i] + [False] * (start.size(1) - len(features.in_context[i])),
                           device=start.device)
    first, last = best_spans(start[row:row + 1], end[row:row + 1], context[None], tuned.max_answer_length)[0].tolist()
    offsets = features.offsets[i]
    return example.pair[offsets[first][0]:offsets[last][1]]


def task_scores(task: str, examples: list[Example], predictions: list) -> dict[str, float]:
    """The task's metrics of `predictions` against the examples' targets."""
    gold = [e.target for e in examples]
    if task in ("classify", "pair"):
        return {"accuracy": accuracy(predictions, gold)} | f1_scores(predictions, gold) | {
            "matthews": matthews_correlation(predictions, gold)}
    if task == "regress":
        return {"pearson": pearson(predictions, gold), "spearman": spearman(predictions, gold)}
    if task == "tag":
        scores = entity_f1(predictions, gold)
        return {"entity_f1": scores["f1"], "entity_precision": scores["precision"], "entity_recall": scores["recall"]}
    if task == "qa":
        return {"exact_match": float(np.mean([exact_match(p, [g]) for p, g in zip(predictions, gold)])),
                "f1": float(np.mean([token_f1(p, [g]) for p, g in zip(predictions, gold)]))}
    return {"accuracy": accuracy(predictions, gold)}


def save_finetuned(tuned: FinetunedEncoder, directory: Path, scores: dict) -> Path:
    """Write the encoder (HF BERT layout, with its tokenizer), the head's own weights and task.json, atomically."""
    head_state = {k: v.detach().cpu().contiguous() for k, v in tuned.head.state_dict().items()
                  if not k.startswith("encoder.")}
    info = {"task": tuned.task, "labels": tuned.labels, "max_length": tuned.max_length,
            "max_answer_length": tuned.max_answer_length, "head": type(tuned.head).__name__,
            "scores": _eval_part(scores)}
    with atomic_path(directory) as tmp:
        save_hf_encoder_dir(tuned.head.encoder, tmp, tuned.tokenizer)
        save_file(head_state, tmp / HEAD_FILE)
        (tmp / TASK_FILE).write_text(json.dumps(info, indent=2))
    return directory


def load_finetuned(path: str | Path, device: str = "cpu") -> FinetunedEncoder:
    """The fine-tuned encoder saved by `finetune_encoder` in `path` (the run's --out, or its model/)."""
    path = Path(path)
    if (path / "model" / TASK_FILE).is_file():
        path = path / "model"
    if not (path / TASK_FILE).is_file():
        raise LmlabError(f"'{path}' holds no fine-tuned encoder ({TASK_FILE} is missing); pass the --out of a "
                         "finished `lmlab finetune` run")
    info = json.loads((path / TASK_FILE).read_text())
    encoder, tokenizer = load_encoder(path)
    cfg = EncoderFinetuneConfig(max_length=info["max_length"], max_answer_length=info["max_answer_length"])
    head = TASK_SPECS[info["task"]].head(encoder, len(info["labels"]), cfg)
    head.load_state_dict(head.state_dict() | load_file(path / HEAD_FILE))
    return FinetunedEncoder(head.to(pick_device(device)).eval(), tokenizer, info["task"], info["labels"],
                            info["max_length"], info["max_answer_length"])

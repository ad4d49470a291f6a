"""Fine-tuning a BERT encoder on a task: the recipe of Devlin et al. (2018), section 4.

Read top to bottom: examples (a CSV/JSONL file per split, or the embedded sentiment task) -> the
encoder (a preset trained from scratch, a zoo name, an HF BERT directory, an lmlab run) and its
tokenizer -> the task's head on top (`lmlab.heads`) -> token ids once -> epochs of shuffled
batches, the head's loss on each (`step_examples`), through the one training loop
(`training.loop.run_steps`: AdamW, learning rate warmed up linearly then decayed linearly to 0,
gradient clipping, --grad-accum, bf16, several processes under torchrun) -> after each epoch the
task's metric on the evaluation set; the best model so far is kept, and training stops early
after `patience` epochs without improvement.

The network is the encoder with the task's head on top (`heads.task_model.EncoderWithHead`). The
result, `out/model`, is an HF BERT directory (config.json, model.safetensors, tokenizer.json) plus
`head.safetensors` and `task.json` (task, labels, lengths, the best scores), written and read back
by `models.encoder_task_files` (`load_finetuned` gives a `FinetunedEncoder` that predicts). The
loop's checkpoints, one per epoch (the early-stopping state in them), make a stopped run resume
exactly; metrics.jsonl, loss.png and eval.png show the run.
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

from lmlab.data.encoder_batches import Features, collate, encode_examples
from lmlab.data.encoder_tasks import (
    DEFAULT_COLUMNS,
    EMBEDDED_TASKS,
    Columns,
    Example,
    check_choice_counts,
    check_labels,
    embedded_examples,
    label_names,
    read_examples,
)
from lmlab.errors import LmlabError
from lmlab.eval.entity_f1 import entity_f1
from lmlab.eval.metrics import accuracy, f1_scores, matthews_correlation, pearson, spearman
from lmlab.eval.qa_metrics import exact_match, token_f1
from lmlab.heads.task_model import EncoderWithHead
from lmlab.losses.task_heads import classification_loss, regression_loss, span_loss, tagging_loss
from lmlab.models.bert.model import BertEncoder
from lmlab.models.encoder_task_files import save_finetuned
from lmlab.models.encoders import build, new_pooler
from lmlab.models.finetuned_encoder import TASK_HEADS, FinetunedEncoder, predict_features, task_head
from lmlab.models.load import load_encoder
from lmlab.models.presets import names, preset
from lmlab.tokenizers.bpe import load_tokenizer
from lmlab.tokenizers.wordpiece import load_wordpiece, train_wordpiece
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.device import training_device
from lmlab.training.loop import log_before, measured, part_of, run_steps, start_session
from lmlab.training.post_training import split_examples
from lmlab.training.progress import save_loss_curve
from lmlab.training.recipe_configs import EncoderFinetuneConfig
from tokenizers import Tokenizer

SCRATCH_VOCAB_SIZE = 8000  # WordPiece trained on the training texts when the encoder starts from a preset


class TruncationWarning(UserWarning):
    """Some inputs were longer than --max-length and were cut."""


@dataclass(frozen=True)
class TaskSpec:
    """What differs between tasks besides the head (`models.finetuned_encoder.TASK_HEADS`): its loss, and
    the score early stopping watches (higher is better)."""

    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    metric: str


TASK_SPECS = {
    "classify": TaskSpec(classification_loss, "accuracy"),
    "pair": TaskSpec(classification_loss, "accuracy"),
    "regress": TaskSpec(regression_loss, "pearson"),
    "tag": TaskSpec(tagging_loss, "entity_f1"),
    "qa": TaskSpec(span_loss, "f1"),
    "choice": TaskSpec(classification_loss, "accuracy"),
}


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
    encoder, tok, source = starting_encoder(model, tokenizer, _texts(train_examples), cfg.loop.seed)
    network = task_model(encoder, task, len(labels), cfg).to(dev)
    tuned = FinetunedEncoder(network, tok, task, labels, cfg.max_length, cfg.max_answer_length)
    train_features = _encoded(tuned, train_examples, cfg, train)
    eval_features = _encoded(tuned, eval_examples, cfg, eval_data or train)
    trainable = [i for i, target in enumerate(train_features.targets) if target is not None]  # qa: answer kept
    if not trainable:
        raise LmlabError(f"no training example of '{train}' keeps its answer within --max-length {cfg.max_length} "
                         "tokens; raise --max-length")

    settings = {"recipe": "finetune_encoder", "model": source, "task": task, "train": train, "eval": eval_data,
                "data_key": _data_key(train_examples, eval_examples), "labels": labels} | dataclasses.asdict(cfg)
    steps_per_epoch = math.ceil(len(trainable) / cfg.loop.batch_size)
    all_epochs = cfg.epochs * steps_per_epoch
    max_steps = min(all_epochs, cfg.loop.max_steps or all_epochs)  # a smoke run: fewer
    loop = cfg.loop.replace(max_steps=max_steps, eval_every=steps_per_epoch, checkpoint_every=steps_per_epoch,
                            keep_checkpoints=2)
    session = start_session(out, network, cfg.optim, loop, settings, ckpt)
    if not session.resumed:
        session.state.update(best=None, best_epoch=0, best_scores={}, bad_epochs=0, stopped_early=False)
        if session.dist.is_main:
            tok.save(str(out / "tokenizer.json"))

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        indices = part_of(step_examples(len(trainable), cfg.loop.batch_size, step, cfg.loop.seed, parts), part, parts)
        batch = {k: v.to(dev) for k, v in collate(train_features, [trainable[i] for i in indices]).items()}
        outputs = network(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        return spec.loss(outputs, batch["targets"]), {"epoch": (step + 1) / steps_per_epoch}

    def scores() -> dict:
        predictions = predict_features(tuned, eval_examples, eval_features)
        return {f"eval_{name}": value for name, value in task_scores(task, eval_examples, predictions).items()}

    def evaluate() -> dict:  # at each epoch's end: keep the best model, count the epochs without a better one
        row = scores()

        def save_best() -> None:
            if session.dist.is_main:
                save_finetuned(tuned, out / "model", _eval_part(row))
        keep_best(_eval_part(row), spec.metric, session.step // steps_per_epoch, session.state, cfg.patience,
                  save_best)
        return row

    log_before(session, scores, epoch=0)
    if not session.state["stopped_early"]:  # a run that stopped early is over: resuming it trains no more
        run_steps(session, step_loss, evaluate, stop_after, show_progress, curves={"train loss": "loss"},
                  stop=lambda: session.state["stopped_early"])
    finished = session.step >= loop.max_steps or session.state["stopped_early"]
    if session.metrics is not None:
        save_loss_curve(session.metrics.read(), out / "eval.png", {f"eval {spec.metric}": f"eval_{spec.metric}"},
                        ylabel=spec.metric)
    state, (before, _) = session.state, measured(session)
    return EncoderFinetuneResult(session.step, finished, state["stopped_early"] and session.step < loop.max_steps,
                                 spec.metric, _eval_part(before), state["best_scores"], state["best_epoch"],
                                 out / "model" if finished else None)


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


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled order of the n training examples in `epoch`: a pure function of (seed, epoch)."""
    return np.random.default_rng((seed, epoch)).permutation(n)


def step_examples(n: int, batch_size: int, step: int, seed: int, parts: int = 1) -> np.ndarray:
    """Which of the n training examples optimizer step `step` trains on: epochs of shuffled batches
    of `batch_size`, the last batch of an epoch shorter. Cut into `parts` (processes x --grad-accum),
    that short batch is filled up to a multiple of `parts` with the epoch's first examples again, as
    torch's DistributedSampler pads, so its parts are equal and every example still trains once an epoch."""
    epoch, position = divmod(step, math.ceil(n / batch_size))
    order = epoch_order(n, seed, epoch)
    batch = order[position * batch_size:][:batch_size]
    return np.concatenate([batch, np.resize(order, -len(batch) % parts)])


def load_splits(task: str, train: str, eval_data: str | None, columns: Columns, cfg: EncoderFinetuneConfig
                ) -> tuple[list[Example], list[Example]]:
    """(training, evaluation) examples: from files, from an embedded task, or a file split in two."""
    if train in EMBEDDED_TASKS and not Path(train).exists():
        if EMBEDDED_TASKS[train] != task:
            raise LmlabError(f"the embedded data '{train}' is a '{EMBEDDED_TASKS[train]}' task, not '{task}'; "
                             f"pass --task {EMBEDDED_TASKS[train]}")
        train_examples, eval_examples = embedded_examples(train, cfg.loop.seed)
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
        train_examples, eval_examples = split_examples(train_examples, cfg.eval_fraction, cfg.loop.seed)
    if task == "choice":
        check_choice_counts(train_examples, train)
        check_choice_counts(eval_examples, eval_data or train)
    return train_examples, eval_examples


def starting_encoder(model: str, tokenizer: str | None, texts: list[str], seed: int
                     ) -> tuple[BertEncoder, Tokenizer, str]:
    """(encoder, tokenizer, what to call the model): a preset with fresh weights and a WordPiece trained
    on `texts` (unless `tokenizer` is given), or a trained encoder (zoo name, HF BERT directory, a run
    directory holding model/). A tokenizer with more tokens than the model's vocabulary is refused."""
    if model in names("encoder") and not Path(model).exists():
        tok = _read_tokenizer(tokenizer, 512) if tokenizer else train_wordpiece(texts, SCRATCH_VOCAB_SIZE)
        torch.manual_seed(seed)
        encoder = build(preset(model, vocab_size=tok.get_vocab_size()))
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


def task_model(encoder: BertEncoder, task: str, n_labels: int, cfg: EncoderFinetuneConfig) -> EncoderWithHead:
    """`encoder` with a new head for `task`, its weights drawn from `cfg.loop.seed`; an encoder without the
    [CLS] pooler the head reads (an MLM checkpoint, any DeBERTa) gets a fresh one of its family's kind, as HF
    adds it."""
    if cfg.max_length > encoder.config.context_length:
        raise LmlabError(f"--max-length {cfg.max_length} exceeds the model's {encoder.config.context_length} "
                         "positions; lower --max-length")
    if TASK_HEADS[task].reads == "pooled" and encoder.pooler is None:
        encoder.pooler = new_pooler(encoder.config)
        encoder.config = encoder.config.replace(pooler=True)
    torch.manual_seed(cfg.loop.seed)
    return EncoderWithHead(encoder, task_head(task, encoder.config.d_model, n_labels, cfg.dropout))


def _read_tokenizer(path: str, max_length: int) -> Tokenizer:
    path = Path(path)
    if path.is_dir():
        return load_wordpiece(path, max_length)
    return load_tokenizer(path)  # bounded before the library reads it; one line if it cannot


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

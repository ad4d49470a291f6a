"""Training an RNN encoder-decoder with attention on a generated task (date normalisation, digit reversal).

Read top to bottom: task pairs split by key -> character vocabularies -> teacher forcing
(src, <s> + target, target + </s>) -> cross-entropy -> AdamW with warmup + decay (training.loop,
with exact resume) -> validation loss, sequence and character accuracy while training -> the
model directory and test accuracy at the end.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from lmlab.data.char_vocab import BOS, EOS, PAD, CharVocab
from lmlab.data.pair_tasks import make_task
from lmlab.data.pairs import Pair, TaskSizes
from lmlab.eval.sequence_accuracy import char_accuracy, sequence_accuracy
from lmlab.generation.seq2seq import translate_texts
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.models.seq2seq import Seq2SeqConfig, build_seq2seq
from lmlab.models.seq2seq.files import Seq2SeqModel, save_seq2seq_dir
from lmlab.objectives.teacher_forcing import teacher_forcing
from lmlab.progress import in_batches
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.loop import evaluated, last_evaluation, part_of, run_steps, start_session
from lmlab.training.post_training import batch_indices
from lmlab.training.progress import save_loss_curve
from lmlab.training.recipe_configs import Seq2SeqTrainConfig

ACCURACY_CURVES = {"validation sequence accuracy": "val_seq_acc", "validation character accuracy": "val_char_acc"}


@dataclass(frozen=True)
class Seq2SeqResult:
    """How a training session ended, what it saved, and its last held-out scores."""

    step: int
    finished: bool  # False when it stopped early (stop_after, Ctrl-C): resume to finish
    model_dir: Path | None
    validation: dict  # the last validation metrics: val_loss, val_seq_acc, val_char_acc
    test: dict  # at the end of training: test_seq_acc, test_char_acc (greedy); {} when not finished


def train_seq2seq(cfg: Seq2SeqTrainConfig, out: str | Path, resume: bool = False, stop_after: int | None = None,
                  show_progress: bool = True) -> Seq2SeqResult:
    """Train the encoder-decoder of `cfg` on its task into the run directory `out` (checkpoints,
    metrics.jsonl, loss.png, accuracy.png, and model/ once max_steps is reached)."""
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    splits = make_task(cfg.task, cfg.loop.seed, task_sizes(cfg))
    src_vocab = CharVocab.from_texts(source for source, _ in splits.train)
    tgt_vocab = CharVocab.from_texts(target for _, target in splits.train)
    model_cfg = Seq2SeqConfig(len(src_vocab), len(tgt_vocab), cfg.embed_dim, cfg.hidden, cfg.attention,
                              cfg.attention_dim, cfg.dropout, pad_id=PAD, bos_id=BOS, eos_id=EOS)
    torch.manual_seed(cfg.loop.seed)
    model = build_seq2seq(model_cfg)
    trained = Seq2SeqModel(model, src_vocab, tgt_vocab, max_len=2 * max(len(t) for _, t in splits.train) + 1,
                           task={"name": cfg.task, "seed": cfg.loop.seed} | dataclasses.asdict(task_sizes(cfg)))
    settings = {"recipe": "seq2seq", "base_model": None, "base_fingerprint": None} | dataclasses.asdict(cfg)
    session = start_session(out, model, cfg.optim, cfg.loop, settings, ckpt)

    sources = [src_vocab.encode(source) for source, _ in splits.train]
    targets = [tgt_vocab.encode(target) for _, target in splits.train]

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        rows = part_of(batch_indices(len(sources), cfg.loop.batch_size, step, cfg.loop.seed), part, parts)
        src, tgt_in, tgt_out = teacher_forcing([sources[i] for i in rows], [targets[i] for i in rows], BOS, PAD)
        return cross_entropy(model(src, tgt_in), tgt_out), {}

    def validate() -> dict:
        pairs = splits.validation
        src, tgt_in, tgt_out = teacher_forcing([src_vocab.encode(s) for s, _ in pairs],
                                               [tgt_vocab.encode(t) for _, t in pairs], BOS, PAD)
        scores = score_pairs(trained, pairs)
        return {"val_loss": cross_entropy(model(src, tgt_in), tgt_out).item(),
                "val_seq_acc": scores["seq_acc"], "val_char_acc": scores["char_acc"]}

    finished = run_steps(session, step_loss, validate, stop_after, show_progress)
    if not session.dist.is_main:  # under torchrun the first process saves and reports
        return Seq2SeqResult(session.step, finished, None, {}, {})
    save_loss_curve(session.metrics.read(), out / "accuracy.png", ACCURACY_CURVES, ylabel="accuracy")
    validation = last_evaluation(session)
    if not finished:
        return Seq2SeqResult(session.step, False, None, validation, {})
    model_dir = save_seq2seq_dir(trained, out / "model")
    test = {f"test_{k}": v for k, v in evaluated(model, lambda: score_pairs(trained, splits.test)).items()}
    session.metrics.write(step=session.step, **test)
    return Seq2SeqResult(session.step, True, model_dir, validation, test)


def task_sizes(cfg: Seq2SeqTrainConfig) -> TaskSizes:
    """The split sizes of the run's task."""
    return TaskSizes(cfg.train_size, cfg.val_size, cfg.test_size)


def score_pairs(trained: Seq2SeqModel, pairs: list[Pair], num_beams: int = 1, length_penalty: float = 1.0) -> dict:
    """Sequence and character accuracy of the model's outputs on (source, target) `pairs` (decoded in
    batches of 64, on a progress bar)."""
    outputs = []
    for batch in in_batches([s for s, _ in pairs], 64, "decoding", "pair"):
        outputs += translate_texts(trained.model, trained.src_vocab, trained.tgt_vocab, batch, trained.max_len,
                                   num_beams, length_penalty)
    references = [t for _, t in pairs]
    return {"seq_acc": sequence_accuracy(outputs, references), "char_acc": char_accuracy(outputs, references),
            "n": len(pairs)}


def task_test_pairs(trained: Seq2SeqModel) -> list[Pair]:
    """The test pairs of the task the model was trained on, generated again from its seed."""
    task = trained.task
    sizes = TaskSizes(task["train"], task["validation"], task["test"], task["held_out_fraction"])
    return make_task(task["name"], task["seed"], sizes).test

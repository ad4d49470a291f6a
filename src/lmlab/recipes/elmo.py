"""Training ELMo's bidirectional language model on raw text.

Read top to bottom: documents -> lower-cased sentences, each between <s> and </s> -> one stream of
word types (every word seen, for the character input) -> the softmax vocabulary (words seen
--min-count times, the rest <unk>) -> blocks of block_size + 1 words, batched by step -> the sum
of the forward and backward LM losses -> AdamW with warmup and cosine decay -> checkpoints that
resume exactly -> a model directory. Perplexity is reported for each direction.
"""

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lmlab.config_checks import MAX_BATCH, MAX_CONTEXT, MAX_SEED, at_least, at_most, check_types, fraction, positive
from lmlab.data.blocks import batch_starts, gather, split_blocks
from lmlab.data.words import build_vocab, corpus_sentences
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.models.elmo.chars import BOS, EOS, char_ids
from lmlab.models.elmo.config import ElmoConfig
from lmlab.models.elmo.files import save_elmo
from lmlab.models.elmo.model import ElmoLM
from lmlab.training.checkpoint import resume_checkpoint, save_checkpoint, set_rng_state, setting_differences
from lmlab.training.interrupt import sigint_flag
from lmlab.training.optim import build_optimizer, lr_multiplier
from lmlab.progress import progress_bar
from lmlab.training.progress import MetricsLog, save_loss_curve

RESUMABLE_CHANGES = {"steps", "eval_every", "checkpoint_every", "keep_checkpoints"}
ELMO_CURVES = {"forward train": "forward_loss", "backward train": "backward_loss",
               "forward validation": "val_forward_loss", "backward validation": "val_backward_loss"}


@dataclass(frozen=True)
class ElmoTrainConfig:
    steps: int = 400
    batch_size: int = 16
    block_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    min_count: int = 2
    val_fraction: float = 0.05
    eval_every: int = 100
    eval_batches: int = 8
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    seed: int = 0

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "steps", "batch_size", "block_size", "min_count", "eval_every", "eval_batches",
                 "checkpoint_every", "keep_checkpoints")
        at_least(self, 0, "warmup_steps", "weight_decay", "seed")
        at_most(self, MAX_CONTEXT, "block_size")
        at_most(self, MAX_BATCH, "batch_size")
        at_most(self, MAX_SEED, "seed")
        positive(self, "lr", "grad_clip")
        fraction(self, "val_fraction")


@dataclass(frozen=True)
class ElmoRun:
    step: int
    forward_ppl: float | None  # validation perplexity of each direction at the last evaluation
    backward_ppl: float | None
    model_dir: Path | None  # None when the run stopped early (Ctrl-C, stop_after)


@dataclass(frozen=True, eq=False)
class WordStream:
    """The training text as word-type ids, with each type's characters and softmax id."""

    types: np.ndarray  # (n_words,) uint32: ids into type_chars / type_targets
    type_chars: torch.Tensor  # (n_types, max_chars) character ids
    type_targets: torch.Tensor  # (n_types,) id in the softmax vocabulary (0 = <unk>)


def word_stream(texts: list[str], min_count: int, max_chars: int):
    """(the WordStream of `texts`, the softmax vocabulary)."""
    sentences = [[BOS, *words, EOS] for words in corpus_sentences(texts)]
    if not sentences:
        raise LmlabError("the training text holds no words; pass a file with some text")
    types = build_vocab(sentences, min_count=1)
    vocab = build_vocab([words[1:-1] for words in sentences], min_count, extra=(BOS, EOS))
    ids = np.array(types.encode([w for words in sentences for w in words]), dtype=np.uint32)
    return WordStream(types=ids, type_chars=char_ids(list(types.words), max_chars),
                      type_targets=torch.tensor(vocab.encode(list(types.words)))), vocab


def train_elmo(texts: list[str], shape: dict, cfg: ElmoTrainConfig, out: str | Path, resume: bool = False,
               stop_after: int | None = None, show_progress: bool = True) -> ElmoRun:
    """Train an ELMo biLM of `shape` (ElmoConfig fields other than vocab_size) on documents `texts`
    into the run directory `out`; the finished model goes to out/model."""
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    max_chars = shape.get("max_chars", ElmoConfig.max_chars)
    stream, vocab = word_stream(texts, cfg.min_count, max_chars)
    model_cfg = ElmoConfig(vocab_size=len(vocab), **shape)
    split = split_blocks(stream.types, cfg.block_size, cfg.val_fraction, cfg.seed)
    if ckpt is not None:
        _check_same_run(ckpt, model_cfg, cfg)

    torch.manual_seed(cfg.seed)
    model = ElmoLM(model_cfg)
    optimizer = build_optimizer(model, cfg.lr, cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_multiplier(
        s, cfg.warmup_steps, cfg.steps, "cosine", 0.1))
    step = 0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"])
        step = ckpt["step"]
    out.mkdir(parents=True, exist_ok=True)
    metrics = MetricsLog(out / "metrics.jsonl", resume_step=step if ckpt is not None else None)

    def batch(starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        block = gather(split.tokens, starts, cfg.block_size)  # (B, T+1) type ids
        return stream.type_chars[block], stream.type_targets[block]  # (B, T+1, C), (B, T+1)

    def validate() -> tuple[float, float]:
        model.eval()
        starts = split.val_blocks[: cfg.eval_batches * cfg.batch_size]
        totals = np.zeros(2)
        with torch.no_grad():
            for lo in range(0, len(starts), cfg.batch_size):
                part = starts[lo:lo + cfg.batch_size]
                totals += [loss.item() * len(part) for loss in model(*batch(part))]
        model.train()
        return tuple(totals / max(len(starts), 1))

    def checkpoint() -> None:
        save_checkpoint(out / "checkpoints", step, {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "model_config": dataclasses.asdict(model_cfg), "train_config": dataclasses.asdict(cfg)},
            cfg.keep_checkpoints)

    end = cfg.steps if stop_after is None else min(cfg.steps, step + stop_after)
    bar = progress_bar(cfg.steps, step, desc="elmo", disable=not show_progress)
    val = None
    model.train()
    with sigint_flag() as interrupted:
        while step < end and not interrupted():
            t0 = time.perf_counter()
            chars, words = batch(batch_starts(split.train_blocks, cfg.batch_size, step, cfg.seed))
            forward_loss, backward_loss = model(chars, words)
            (forward_loss + backward_loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step += 1
            row = {"step": step, "forward_loss": forward_loss.item(), "backward_loss": backward_loss.item(),
                   "lr": scheduler.get_last_lr()[0], "words_per_s": words.numel() / (time.perf_counter() - t0)}
            if step % cfg.eval_every == 0 or step == cfg.steps:
                val = validate()
                row |= {"val_forward_loss": val[0], "val_backward_loss": val[1]}
            metrics.write(**row)
            bar.set_postfix(fwd_ppl=f"{_exp(row['forward_loss']):.1f}", bwd_ppl=f"{_exp(row['backward_loss']):.1f}",
                            refresh=False)
            bar.update(1)
            if step % cfg.checkpoint_every == 0 and step < end:
                checkpoint()
    bar.close()

    checkpoint()
    save_loss_curve(metrics.read(), out / "loss.png", curves=ELMO_CURVES)
    done = step >= cfg.steps
    if done:
        with atomic_path(out / "model") as tmp:
            save_elmo(model, vocab, tmp)
    return ElmoRun(step=step, forward_ppl=_exp(val[0]) if val else None, backward_ppl=_exp(val[1]) if val else None,
                   model_dir=out / "model" if done else None)


def _check_same_run(ckpt: dict, model_cfg: ElmoConfig, cfg: ElmoTrainConfig) -> None:
    """A resumed run must be the run that wrote the checkpoint."""
    diffs = setting_differences(ckpt["model_config"], dataclasses.asdict(model_cfg))
    diffs += setting_differences(ckpt["train_config"], dataclasses.asdict(cfg), RESUMABLE_CHANGES)
    if diffs:
        raise LmlabError(f"--resume with a different config ({'; '.join(diffs)}); rerun with the original "
                         "settings or start a new --out directory")


def _exp(x: float) -> float:
    return math.exp(min(x, 700.0))

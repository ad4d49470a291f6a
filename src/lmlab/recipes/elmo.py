"""Training ELMo's bidirectional language model on raw text.

Read top to bottom: documents -> lower-cased sentences, each between <s> and </s> -> one stream of
word types (every word seen, for the character input) -> the softmax vocabulary (words seen
--min-count times, the rest <unk>) -> blocks of block_size + 1 words, batched by step -> the sum
of the forward and backward LM losses -> the training loop (`lmlab.training.loop`: AdamW with
warmup and cosine decay, checkpoints that resume exactly) -> a model directory. Perplexity is
reported for each direction.
"""

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lmlab.data.blocks import batch_starts, gather, split_blocks
from lmlab.data.words import build_vocab, corpus_sentences
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.models.elmo.chars import BOS, EOS, char_ids
from lmlab.models.elmo.config import ElmoConfig
from lmlab.models.elmo.files import save_elmo
from lmlab.models.elmo.model import ElmoLM
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.loop import last_evaluation, part_of, run_steps, start_session
from lmlab.training.recipe_configs import ElmoTrainConfig

ELMO_CURVES = {"forward train": "forward_loss", "backward train": "backward_loss",
               "forward validation": "val_forward_loss", "backward validation": "val_backward_loss"}


@dataclass(frozen=True)
class ElmoRun:
    step: int
    forward_ppl: float | None  # validation perplexity of each direction at this session's last evaluation
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
    into the run directory `out`; the finished model goes to out/model. `stop_after` ends this
    session after that many steps with a checkpoint (so does Ctrl-C), and `resume=True` continues it."""
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    max_chars = shape.get("max_chars", ElmoConfig.max_chars)
    stream, vocab = word_stream(texts, cfg.min_count, max_chars)
    model_cfg = ElmoConfig(vocab_size=len(vocab), **shape)
    split = split_blocks(stream.types, cfg.block_size, cfg.val_fraction, cfg.loop.seed)
    torch.manual_seed(cfg.loop.seed)
    model = ElmoLM(model_cfg)
    settings = {"recipe": "elmo", "model": dataclasses.asdict(model_cfg), "train": dataclasses.asdict(cfg)}
    session = start_session(out, model, cfg.optim, cfg.loop, settings, ckpt)

    def batch(starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        block = gather(split.tokens, starts, cfg.block_size)  # (B, T+1) type ids
        return stream.type_chars[block], stream.type_targets[block]  # (B, T+1, C), (B, T+1)

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        starts = part_of(batch_starts(split.train_blocks, cfg.loop.batch_size, step, cfg.loop.seed), part, parts)
        forward_loss, backward_loss = model(*batch(starts))
        return forward_loss + backward_loss, {"forward_loss": forward_loss.item(),
                                              "backward_loss": backward_loss.item()}

    def validate() -> dict:  # each direction's mean loss per word over eval_batches held-out batches
        starts = split.val_blocks[: cfg.eval_batches * cfg.loop.batch_size]
        totals = np.zeros(2)
        for lo in range(0, len(starts), cfg.loop.batch_size):
            part = starts[lo:lo + cfg.loop.batch_size]
            totals += [loss.item() * len(part) for loss in model(*batch(part))]
        forward, backward = totals / max(len(starts), 1)
        return {"val_forward_loss": forward, "val_backward_loss": backward}

    words_per_step = cfg.loop.batch_size * (cfg.block_size + 1)
    finished = run_steps(session, step_loss, validate, stop_after, show_progress, curves=ELMO_CURVES,
                         ylabel="loss (nats/token)", throughput=("words_per_s", words_per_step))
    if finished and session.dist.is_main:
        with atomic_path(out / "model") as tmp:
            save_elmo(model, vocab, tmp)
    session.dist.barrier()
    ppl = {key: _exp(loss) for key, loss in last_evaluation(session).items()}
    return ElmoRun(step=session.step, forward_ppl=ppl.get("val_forward_loss"),
                   backward_ppl=ppl.get("val_backward_loss"), model_dir=out / "model" if finished else None)


def _exp(x: float) -> float:
    return math.exp(min(x, 700.0))

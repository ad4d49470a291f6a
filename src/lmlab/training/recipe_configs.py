"""The settings of the training recipes the CLI turns into flags (ELMo, the GRU seq2seq, fine-tuning an
encoder or an encoder-decoder), in a module without torch, so that their parsers load at once. The
post-training ones are `post_train_config.py` and `alignment_configs.py`."""

import dataclasses
from dataclasses import dataclass
from typing import Literal

from lmlab.config import LOOP_DEFAULTS, LoopConfig, OptimConfig
from lmlab.config_checks import (
    MAX_CONTEXT,
    MAX_VOCAB,
    MAX_WIDTH,
    at_least,
    at_most,
    check_types,
    flag,
    fraction,
    positive,
)
from lmlab.data.pair_tasks import TASKS
from lmlab.errors import LmlabError


@dataclass(frozen=True)
class ElmoTrainConfig:
    """Everything about an ELMo training run except the model's shape and the data."""

    # a batch of blocks
    loop: LoopConfig = LoopConfig(max_steps=400, batch_size=16, eval_every=100, checkpoint_every=100,
                                  keep_checkpoints=2, log_every=1)
    block_size: int = 32  # tokens per training sequence
    optim: OptimConfig = OptimConfig(lr=3e-3, warmup_steps=20, weight_decay=0.01)
    min_count: int = 2  # words seen fewer times are <unk>
    val_fraction: float = 0.05  # share of the data held out for validation
    eval_batches: int = 8  # held-out batches per evaluation

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "block_size", "min_count", "eval_batches")
        at_most(self, MAX_CONTEXT, "block_size")
        fraction(self, "val_fraction")


@dataclass(frozen=True)
class Seq2SeqTrainConfig:
    """The task, the network's sizes and the optimisation of one run."""

    task: str = dataclasses.field(default="dates", metadata={"choices": tuple(TASKS), "help": (
        "the generated problem to learn")})
    train_size: int = 20000  # training pairs generated
    val_size: int = 500  # validation pairs (evaluated greedily every eval_every steps)
    test_size: int = 1000  # test pairs (evaluated at the end)
    attention: Literal["additive", "multiplicative", "dot", "none"] = "additive"  # the attention of the decoder over the encoder's states (none: the last state only)
    embed_dim: int = 32  # width of the token embeddings
    hidden: int = 128  # width of the GRU states
    attention_dim: int = 64  # width of additive attention's hidden layer
    dropout: float = 0.0  # dropout probability in training
    loop: LoopConfig = LoopConfig(max_steps=1500, batch_size=64, eval_every=250, checkpoint_every=250,
                                  keep_checkpoints=2)
    optim: OptimConfig = OptimConfig(lr=3e-3, min_lr_ratio=0.05, warmup_steps=50, weight_decay=0.0)

    def __post_init__(self):
        if self.task not in TASKS:
            raise LmlabError(f"unknown task '{self.task}'; choose one of {', '.join(TASKS)}")
        check_types(self)
        at_least(self, 1, "train_size", "val_size", "test_size", "embed_dim", "hidden", "attention_dim")
        at_most(self, MAX_WIDTH, "embed_dim", "hidden", "attention_dim")
        fraction(self, "dropout")

    def replace(self, **changes) -> "Seq2SeqTrainConfig":
        return dataclasses.replace(self, **changes)


PER_EPOCH = ("eval_every", "checkpoint_every", "keep_checkpoints")  # the loop's settings the epochs set


@dataclass(frozen=True)
class EncoderFinetuneConfig:
    """Everything about an encoder fine-tuning run except the model, the data and the output directory."""

    epochs: int = 3  # passes over the training examples (all of them unless --max-steps stops sooner)
    # max_steps None: all the epochs' steps (a number: a smoke run stops there). The run evaluates and
    # checkpoints once an epoch, keeping the newest 2: eval_every, checkpoint_every, keep_checkpoints stay unset
    loop: LoopConfig = LoopConfig(max_steps=None, batch_size=32)
    # Devlin et al.: linear warmup over 10% of the steps, linear decay to 0, betas (0.9, 0.999). BERT's lr
    # range is 2e-5 to 5e-5; an encoder trained from scratch wants ~1e-3.
    optim: OptimConfig = OptimConfig(lr=5e-5, warmup_ratio=0.1, schedule="linear", min_lr_ratio=0.0,
                                     weight_decay=0.01, beta2=0.999)
    max_length: int = 128  # tokens per input, [CLS] and [SEP] included
    patience: int = 2  # epochs without a better evaluation score before stopping
    dropout: float = 0.1  # before the head's linear layer
    max_answer_length: int = 30  # qa: tokens in a predicted answer at most
    truncate: bool = True  # cut inputs over max_length (with a warning) rather than refuse them
    eval_fraction: float = 0.1  # without an evaluation file: share of the training examples held out

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "epochs", "max_length", "patience", "max_answer_length")
        at_most(self, MAX_CONTEXT, "max_length", "max_answer_length")
        per_epoch = [name for name in PER_EPOCH if getattr(self.loop, name) != LOOP_DEFAULTS[name]]
        if per_epoch:
            raise LmlabError(f"{', '.join(flag(name) for name in per_epoch)}: fine-tuning an encoder evaluates and "
                             "checkpoints once an epoch; drop them")
        positive(self, "eval_fraction")
        fraction(self, "dropout")
        fraction(self, "eval_fraction")


@dataclass(frozen=True)
class EncoderDecoderFinetuneConfig:
    """Everything about a sequence-to-sequence fine-tuning run except the model, the data and the output directory."""

    # a batch of pairs
    loop: LoopConfig = LoopConfig(max_steps=1000, batch_size=32, eval_every=100, checkpoint_every=100,
                                  keep_checkpoints=2)
    # lr 1e-3 suits a tiny model; a large pre-trained one wants ~1e-4
    optim: OptimConfig = OptimConfig(lr=1e-3, warmup_steps=50, weight_decay=0.01)
    vocab_size: int = 1000  # the BPE trained on the pairs when --model is a preset
    truncate: bool = False  # cut texts longer than the model reads (with a warning) rather than refuse them
    val_fraction: float = 0.1  # a pair file without --eval: the share held out for validation
    train_size: int = 500  # a generated task: its training pairs
    val_size: int = 200  # a generated task: its validation pairs
    test_size: int = 500  # a generated task: its test pairs, scored once training is done
    max_new_tokens: int = 32  # greedy outputs stop after this many tokens

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "vocab_size", "train_size", "val_size", "test_size", "max_new_tokens")
        at_most(self, MAX_VOCAB, "vocab_size")
        at_most(self, MAX_CONTEXT, "max_new_tokens")
        positive(self, "val_fraction")
        fraction(self, "val_fraction")

    def replace(self, **changes) -> "EncoderDecoderFinetuneConfig":
        return dataclasses.replace(self, **changes)

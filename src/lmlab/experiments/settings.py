"""The settings of each experiment (`lmlab experiment ...`) and the methods it compares, in a module without
torch, so that the command's parser lists them at once. A setting naming a preset is checked against the
model registry when the settings are made, which imports it then."""

from dataclasses import dataclass

from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.config_checks import at_least, fraction, positive
from lmlab.errors import LmlabError
from lmlab.objectives.span_noise import SpanNoise


@dataclass(frozen=True)
class VanishingGradientSettings:
    cells: tuple[str, ...] = ("rnn", "lstm", "gru")
    steps_back: int = 30  # K
    train_steps: int = 100  # 0: measure at initialisation only
    d_model: int = 64
    hidden: int = 64
    vocab_size: int = 512
    batch_size: int = 32  # for training and for each measured batch
    batches: int = 4  # measured batches per model and stage
    block_size: int = 32  # the BPTT length during training
    lr: float = 3e-3
    seed: int = 0


@dataclass(frozen=True)
class PretrainingExperimentSettings:
    """The presets, the corpus and the task, and how long each stage trains."""

    presets: tuple[str, ...] = ("t5-tiny", "bart-tiny")
    corpus: str = "numbers"  # the generated number corpus (see above), a text file or directory, or an embedded corpus
    corpus_documents: int = 4000  # the generated corpus: documents of 3 to 8 sentences
    paired: float = 0.25  # the generated corpus: share of sentences that write a number both ways
    task: str = "numbers"  # a generated task (lmlab.data.pair_tasks)
    vocab_size: int = 1000
    pretrain_steps: int = 1500
    pretrain_batch_size: int = 32
    block_size: int = 64  # tokens per pre-training chunk
    pretrain_lr: float = 2e-3
    noise_density: float = 0.5  # T5's span corruption: the share of tokens dropped (see above)
    mean_span_length: float = 8.0  # T5's span corruption: the mean length of a dropped span
    finetune_steps: int = 600
    finetune_batch_size: int = 32
    finetune_lr: float = 1e-3
    train_pairs: int = 300  # a small fine-tuning set: where pre-training should matter
    val_pairs: int = 200
    test_pairs: int = 500
    eval_every: int = 50  # fine-tuning steps between validation accuracies
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "presets", tuple(self.presets))
        from lmlab.models.presets import names  # the registry: torch

        unknown = [p for p in self.presets if p not in names("encoder-decoder")]
        if unknown or not self.presets:
            raise LmlabError(f"presets {unknown or '(none)'} are not encoder-decoder presets; choose from: "
                             f"{', '.join(names('encoder-decoder'))}")
        for name in ("pretrain_steps", "finetune_steps", "train_pairs", "val_pairs", "test_pairs", "eval_every"):
            if getattr(self, name) < 1:
                raise LmlabError(f"{name}={getattr(self, name)} must be at least 1")
        _ = self.span_noise  # building it checks noise_density and mean_span_length

    @property
    def span_noise(self) -> SpanNoise:
        return SpanNoise(self.noise_density, self.mean_span_length)


@dataclass(frozen=True)
class ScalingSettings:
    """What the grid trains on, how big it may grow, and how each run trains."""

    data: str = "markov"  # markov, stdlib, or a text file / directory / JSONL
    budget_minutes: float = 30.0  # the whole grid's estimated time, calibration included
    model: str = "gpt2-tiny"  # the decoder family (its norm, MLP, positions); the ladder sets the shapes
    vocab_size: int = 1024
    batch_size: int = 8  # small batches: on a CPU budget, steps are what tiny models lack
    block_size: int = 64
    lr: float = 1e-2  # the peak learning rate up to d_model 32, scaled by 32 / d_model above (wider nets need less)
    min_steps: int = 400  # the shortest run; token budgets double from here
    min_parameters: float = 500  # the ladder's sizes from here ...
    max_parameters: float = 7e6  # ... to here (non-embedding)
    tokens_per_parameter: tuple[float, float] = (2.0, 512.0)  # the band of D / N a run must lie in
    bootstrap: int = 100  # resamples for the exponents' intervals
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "tokens_per_parameter", tuple(self.tokens_per_parameter))
        low, high = self.tokens_per_parameter
        if not 0 < low < high:
            raise LmlabError(f"--tokens-per-parameter {low:g} {high:g} must be two numbers 0 < low < high")
        if not 0 < self.min_parameters <= self.max_parameters:
            raise LmlabError(f"--min-parameters {self.min_parameters:g} and --max-parameters {self.max_parameters:g} "
                             "must satisfy 0 < min <= max (the ladder runs from 888 to 6.3M)")
        if self.budget_minutes <= 0 or self.min_steps < 1 or self.bootstrap < 0:
            raise LmlabError("--budget-minutes must be positive, --min-steps at least 1, --bootstrap at least 0")
        from lmlab.models.presets import kind  # the registry: torch

        if kind(self.model) != "decoder":
            raise LmlabError(f"--model {self.model} is not a decoder preset; choose a decoder family's preset, "
                             "such as gpt2-tiny or llama-tiny")
        TrainConfig(loop=LoopConfig(max_steps=1000, batch_size=self.batch_size), block_size=self.block_size,
                    optim=OptimConfig(lr=self.lr))

    @property
    def sizes(self) -> list[int]:
        """The ladder shapes with min_parameters <= N <= max_parameters."""
        from lmlab.experiments.scaling_grid import LADDER, ladder_config, non_embedding_parameters
        from lmlab.models.presets import preset

        base = preset(self.model)
        return [i for i in range(len(LADDER)) if self.min_parameters <= non_embedding_parameters(
            ladder_config(base, i, self.vocab_size, self.block_size)) <= self.max_parameters]


CAUSAL_METHODS = ("full", "window", "bigbird", "lsh", "performer")


@dataclass(frozen=True)
class AttentionComparisonSettings:
    """The methods, the model and data they share, and the training budget each gets."""

    methods: tuple[str, ...] = CAUSAL_METHODS
    data: str = "stdlib"
    model: str = "llama-tiny"
    n_layers: int = 2
    d_model: int = 128
    block_size: int = 1024  # tokens per training sequence: long enough for the methods to differ
    max_steps: int = 300
    batch_size: int = 4
    lr: float = 2e-3
    vocab_size: int = 2048
    attention_window: int = 128
    attention_rank: int = 64
    attention_hashes: int = 2
    copy_steps: int = 300  # copy-task training steps of each method (0: no copy task)
    copy_symbols: int = 32  # the copy task's alphabet: chance is 1 / copy_symbols
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "methods", tuple(self.methods))
        # every number checked here, by its flag, before any run starts (a bad one would otherwise fail a run
        # midway, under the name of a setting derived from it)
        at_least(self, 1, "n_layers", "d_model", "block_size", "max_steps", "batch_size", "vocab_size",
                 "attention_window", "attention_rank", "attention_hashes")
        at_least(self, 0, "copy_steps", "seed")
        at_least(self, 2, "copy_symbols")
        positive(self, "lr")
        unknown = [m for m in self.methods if m not in CAUSAL_METHODS]
        if unknown or not self.methods:
            raise LmlabError(f"--methods {unknown or '(none)'}: a decoder compares causal methods, choose from "
                             f"{', '.join(CAUSAL_METHODS)}")
        from lmlab.models.presets import kind  # the registry: torch

        if kind(self.model) != "decoder":
            raise LmlabError(f"--model {self.model} is not a decoder preset; choose gpt2-tiny or llama-tiny, say")


NGRAMS = {"kn3": (3, "kn"), "kn4": (4, "kn"), "kn5": (5, "kn"), "mkn5": (5, "mkn")}  # name: (order, smoothing)
NEURAL = ("window", "lstm", "gru", "transformer")
LABELS = {"kn3": "3-gram KN", "kn4": "4-gram KN", "kn5": "5-gram KN", "mkn5": "5-gram modified KN",
          "window": "window LM (5 tokens)", "lstm": "LSTM (2 x 256)", "gru": "GRU (2 x 256)",
          "transformer": "transformer (gpt2, 2 x 128)"}


@dataclass(frozen=True)
class ClassicVsNeuralSettings:
    """The language models (methods), the text they share and each neural model's training budget."""

    methods: tuple[str, ...] = (*NGRAMS, *NEURAL)
    data: str = "kjv"
    held_out: str | None = "kjv-held-out"  # None: the validation blocks of data's own split
    vocab_size: int = 4096
    block_size: int = 64  # tokens per training sequence of the neural models (and the n-grams' split)
    batch_size: int = 16
    max_steps: int = 12000  # optimizer steps of each neural model: 13 passes over kjv, where every curve flattens
    points: int = 8  # points on each curve
    lr: float = 3e-3
    dropout: float = 0.0  # of every neural model: on about a million tokens, an unregularized LSTM overfits
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "methods", tuple(self.methods))
        at_least(self, 1, "vocab_size", "batch_size", "max_steps", "points")
        at_least(self, 2, "block_size")
        at_least(self, 0, "seed")
        positive(self, "lr")
        fraction(self, "dropout")
        unknown = [m for m in self.methods if m not in LABELS]
        if unknown or not self.methods:
            raise LmlabError(f"--methods {unknown or '(none)'}: choose from {', '.join(LABELS)}")
        if self.points > self.max_steps:
            raise LmlabError(f"--points {self.points} exceeds --max-steps {self.max_steps}: a point is a checkpoint")

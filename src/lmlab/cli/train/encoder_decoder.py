"""The encoder-decoder half of `lmlab train`: `--model t5-tiny|bart-tiny|transformer-tiny|…` pre-trains
an encoder-decoder preset with its own objective (T5: span corruption; BART and the Transformer:
denoising) or `--objective span_corruption|denoising|gap_sentences`; `--noise-density` and
`--mean-span-length` set how much span corruption drops. `cli.train` adds these flags
(`add_encoder_decoder_flags`) and hands encoder-decoder presets to `run_encoder_decoder`."""

from lmlab.cli.common.config_flags import config_overrides
from lmlab.cli.train.encoder import ENCODER_FLAGS
from lmlab.cli.train.result import print_result
from lmlab.config import ModelConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.objectives.span_noise import SpanNoise

SPAN_FLAGS = ("noise_density", "mean_span_length")  # span corruption's settings (SpanNoise)

# The model flags an encoder-decoder takes: its shape. --n-layers sets both stacks, --context-length both lengths.
SHAPE_FLAGS = {"vocab_size": ("vocab_size",), "n_heads": ("n_heads",), "d_model": ("d_model",), "d_ff": ("d_ff",),
               "norm_eps": ("norm_eps",), "dropout": ("dropout",),
               "n_layers": ("n_encoder_layers", "n_decoder_layers"),
               "context_length": ("max_source_length", "max_target_length")}


def add_encoder_decoder_flags(p) -> None:
    """--noise-density and --mean-span-length: how much T5's span corruption drops."""
    group = p.add_argument_group("encoder-decoder pre-training with span corruption")
    default = SpanNoise()
    group.add_argument("--noise-density", type=float, metavar="X",
                       help=f"the share of tokens dropped (default {default.noise_density}, as T5)")
    group.add_argument("--mean-span-length", type=float, metavar="X",
                       help=f"the mean length of a dropped span (default {default.mean_span_length:g}, as T5)")


def run_encoder_decoder(args) -> None:
    """Pre-train the encoder-decoder preset `args.model` with its (or `--objective`'s) objective."""
    from lmlab.models.presets import family_of, preset
    from lmlab.objectives.registry import choose_objective
    from lmlab.recipes.pretrain_encoder_decoder import pretrain_encoder_decoder

    model_flags = config_overrides(args, ModelConfig)
    foreign = sorted(name for name in model_flags if name not in SHAPE_FLAGS)
    foreign += [name for name in ENCODER_FLAGS if getattr(args, name) is not None]
    if foreign:
        raise LmlabError(f"{', '.join('--' + f.replace('_', '-') for f in foreign)} do not apply to encoder-decoder "
                         f"preset {args.model} (its architecture is its family's); drop them")
    overrides = {field: value for name, value in model_flags.items() for field in SHAPE_FLAGS[name]}
    model_cfg = preset(args.model, **overrides)
    span = {name: getattr(args, name) for name in SPAN_FLAGS if getattr(args, name) is not None}
    objective = choose_objective(family_of(args.model), args.objective)
    if span and "noise" not in objective.settings:
        raise LmlabError(f"{', '.join('--' + f.replace('_', '-') for f in span)} apply to span_corruption, not to "
                         f"{objective.name}; drop them or pass --objective span_corruption")
    result = pretrain_encoder_decoder(model_cfg, TrainConfig(**config_overrides(args, TrainConfig)), args.data,
                                      args.out, objective=args.objective, tokenizer=args.tokenizer, resume=args.resume,
                                      stop_after=args.stop_after, device=args.device, span_noise=SpanNoise(**span))
    print_result(result, args)

"""The encoder-decoder half of `lmlab train`: `--model t5-tiny|bart-tiny|transformer-tiny|…` pre-trains
an encoder-decoder preset with its own objective (T5: span corruption; BART and the Transformer:
denoising) or `--objective span_corruption|denoising|gap_sentences`. `cli.train` hands encoder-decoder
presets to `run_encoder_decoder`."""

from lmlab.cli.train_encoder import ENCODER_FLAGS, _given
from lmlab.cli.train_result import print_result
from lmlab.config import ModelConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.config import encoder_decoder_preset
from lmlab.recipes.pretrain_seq2seq import pretrain_seq2seq

# The model flags an encoder-decoder takes: its shape. --n-layers sets both stacks, --context-length both lengths.
SHAPE_FLAGS = {"vocab_size": ("vocab_size",), "n_heads": ("n_heads",), "d_model": ("d_model",), "d_ff": ("d_ff",),
               "norm_eps": ("norm_eps",), "dropout": ("dropout",),
               "n_layers": ("n_encoder_layers", "n_decoder_layers"),
               "context_length": ("max_source_length", "max_target_length")}


def run_encoder_decoder(args) -> None:
    """Pre-train the encoder-decoder preset `args.model` with its (or `--objective`'s) objective."""
    model_flags = _given(args, ModelConfig)
    foreign = sorted(name for name in model_flags if name not in SHAPE_FLAGS)
    foreign += [name for name in ENCODER_FLAGS if name != "objective" and getattr(args, name) is not None]
    if foreign:
        raise LmlabError(f"{', '.join('--' + f.replace('_', '-') for f in foreign)} do not apply to encoder-decoder "
                         f"preset {args.model} (its architecture is its family's); drop them")
    overrides = {field: value for name, value in model_flags.items() for field in SHAPE_FLAGS[name]}
    result = pretrain_seq2seq(encoder_decoder_preset(args.model, **overrides), TrainConfig(**_given(args, TrainConfig)),
                              args.data, args.out, objective=args.objective, tokenizer=args.tokenizer,
                              resume=args.resume, stop_after=args.stop_after, device=args.device)
    print_result(result, args.out)

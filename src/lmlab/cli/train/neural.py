"""The `lmlab train` flags and runners of the fixed-window LM (`--arch window`) and the recurrent
LMs (`--arch rnn|lstm|gru`). They reuse the transformer's flags where the meaning is the same
(`--d-model` = embedding size, `--n-layers`, `--dropout`, `--tie-embeddings`, `--block-size` = the
BPTT truncation length, every training setting) and add `--window` and `--hidden`; a flag an
architecture does not use is refused with one line."""

import dataclasses

from lmlab.cli.common.config_flags import config_overrides
from lmlab.cli.train.result import print_result
from lmlab.config import ModelConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.models.rnn.config import RNNConfig
from lmlab.models.window.config import WindowConfig

DEFAULT_VOCAB_SIZE = 4096
NEURAL_FLAGS = ("window", "hidden")  # the flags this module adds; the transformer takes neither
_SHARED = {"vocab_size", "context_length", "d_model", "dropout", "tie_embeddings"}
ACCEPTED = {"window": _SHARED | {"window", "hidden"}, "rnn": _SHARED | {"n_layers", "hidden"}}
# Flags some architecture ignores: ModelConfig's, the preset, ours, and the training settings these models lack.
_CHECKED = {f.name for f in dataclasses.fields(ModelConfig)} | {"model", "grad_accum", "compile", *NEURAL_FLAGS}


def add_arguments(parser) -> None:
    """The flags of the window and recurrent LMs, as their own group of `lmlab train`."""
    g = parser.add_argument_group("window and recurrent LMs (--arch window|rnn|lstm|gru)")
    g.add_argument("--window", type=int, metavar="N", help="window LM: tokens read to predict the next (default 5)")
    g.add_argument("--hidden", type=int, metavar="INT",
                   help="hidden size: the window LM's tanh layer (default 256), an RNN's state (default --d-model); "
                        "--d-model when embeddings are tied")


def refuse_flags(args, arch: str, names) -> None:
    """One error line naming the flags among `names` that were given but `--arch arch` does not use."""
    given = sorted(name for name in names if getattr(args, name, None) is not None)
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        verb, pronoun = ("does", "it") if len(given) == 1 else ("do", "them")
        raise LmlabError(f"{flags} {verb} not apply to --arch {arch}; drop {pronoun}")


def run_window(args) -> None:
    refuse_flags(args, "window", _CHECKED - ACCEPTED["window"])
    _train(WindowConfig(**_model_settings(args, "window")), args)


def run_rnn(args) -> None:
    refuse_flags(args, args.arch, _CHECKED - ACCEPTED["rnn"])
    _train(RNNConfig(cell=args.arch, **_model_settings(args, "rnn")), args)


def run_preset(args) -> None:
    """`lmlab train --model window-small|lstm-small|…`: the preset, with the model flags given."""
    from lmlab.models.presets import preset

    cfg = preset(args.model)
    kind, arch = ("window", "window") if isinstance(cfg, WindowConfig) else ("rnn", cfg.cell)
    refuse_flags(args, arch, _CHECKED - ACCEPTED[kind] - {"model"})
    given = {name: getattr(args, name) for name in ACCEPTED[kind] if getattr(args, name, None) is not None}
    _train(preset(args.model, **given), args)


def _model_settings(args, kind: str) -> dict:
    settings = {name: getattr(args, name) for name in ACCEPTED[kind] if getattr(args, name, None) is not None}
    settings.setdefault("vocab_size", DEFAULT_VOCAB_SIZE)
    if "hidden" not in settings and (kind == "rnn" or settings.get("tie_embeddings")):
        settings["hidden"] = settings.get("d_model", RNNConfig.d_model if kind == "rnn" else WindowConfig.d_model)
    return settings


def _train(model_cfg: WindowConfig | RNNConfig, args) -> None:
    from lmlab.recipes.neural_lm import train_neural_lm

    train_cfg = TrainConfig(**config_overrides(args, TrainConfig))
    result = train_neural_lm(model_cfg, train_cfg, args.data, args.out, tokenizer=args.tokenizer, resume=args.resume,
                             stop_after=args.stop_after, device=args.device)
    print_result(result, args)

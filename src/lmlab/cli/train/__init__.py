"""`lmlab train`: pre-train a language model, resumably. `--model PRESET` trains any preset with
overrides: the preset's family decides how (`Family.recipe`, looked up in PRESET_RUNNERS): a decoder,
an encoder, an encoder-decoder, a window or recurrent LM, an n-gram model. `--arch` without a preset
builds a classic model from flags; each architecture adds its own flag group and runner to ARCHS."""

from lmlab.cli import ngram
from lmlab.cli.common.config_flags import add_config_flags, config_overrides
from lmlab.cli.common.listings import add_listing, objective_names, preset_names
from lmlab.cli.train import neural
from lmlab.cli.train.encoder import ENCODER_FLAGS, add_encoder_flags, run_encoder
from lmlab.cli.train.encoder_decoder import SPAN_FLAGS, add_encoder_decoder_flags, run_encoder_decoder
from lmlab.cli.train.result import print_result
from lmlab.config import ModelConfig, TrainConfig
from lmlab.data.corpora import EMBEDDED
from lmlab.errors import LmlabError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("train", help="pre-train a language model of any family, with its objective",
                              description="Pre-train a model on text: a decoder, an encoder, an encoder-decoder or "
                                          "a classic LM, by its preset's family. Every model and training setting "
                                          "has a flag; unset ones keep the preset's / default value.")
    p.add_argument("--arch", choices=list(ARCHS), default="transformer",
                   help="model architecture (default transformer: a --model preset)")
    add_listing(p.add_argument("--model", help="a preset (`lmlab list --presets`)"), preset_names)
    add_listing(p.add_argument("--objective", metavar="NAME", help="the pre-training objective (default: the "
                               "preset's own; `lmlab list --objectives`)"), objective_names)
    p.add_argument("--data", required=True, help=f"text file, directory, .jsonl, or one of {list(EMBEDDED)}")
    p.add_argument("--out", required=True, help="run directory (checkpoints, metrics, final model)")
    p.add_argument("--tokenizer", help="tokenizer.json or its directory (default: train a BPE, or for an encoder "
                                       "a WordPiece, on the data)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--stop-after", type=int, help="stop (with a checkpoint) after this many steps this session")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 …")
    add_config_flags(p.add_argument_group("model settings"), ModelConfig, skip={"family", "trained_context"})
    add_config_flags(p.add_argument_group("training settings"), TrainConfig)
    add_encoder_flags(p)
    add_encoder_decoder_flags(p)
    ngram.add_train_flags(p)
    neural.add_arguments(p)
    p.set_defaults(run=run)


def run(args) -> None:
    arch, runner = args.arch, ARCHS[args.arch]
    if arch == "transformer" and args.model is not None:
        arch, runner = preset_runner(args.model)  # `--model lstm-small` means --arch lstm with the preset's sizes
    for archs, flags in ARCH_FLAGS.items():
        if arch not in archs:
            neural.refuse_flags(args, arch, flags)
    runner(args)


def preset_runner(name: str):
    """(the --arch it trains as, the runner of its family's recipe) for the preset `name`; a family that
    `lmlab train` does not train is one error naming its own command."""
    from lmlab.models.presets import family_of, preset
    from lmlab.models.rnn import RNNConfig

    family = family_of(name)
    runner = PRESET_RUNNERS.get(family.recipe)
    if runner is None:
        raise LmlabError(f"{name} is a {family.name} preset, which `lmlab train` does not train; use "
                         f"`{family.command}`")
    if family.kind != "classic":
        return "transformer", runner
    cfg = preset(name)
    return (cfg.cell if isinstance(cfg, RNNConfig) else family.name), runner  # an RNN preset trains as its cell


def require_model(args) -> None:
    from lmlab.models.presets import names

    raise LmlabError(f"--model is required for --arch transformer; choose a preset: {', '.join(names('decoder'))}")


def run_decoder(args) -> None:
    """Pre-train the decoder preset `args.model` with its (or `--objective`'s) objective and the model and
    training flags given."""
    from lmlab.models.presets import preset
    from lmlab.recipes.pretrain import pretrain

    refuse_kind_flags(args, SPAN_FLAGS, "encoder-decoder")
    refuse_kind_flags(args, ENCODER_FLAGS, "encoder")
    model_cfg = preset(args.model, **config_overrides(args, ModelConfig))
    train_cfg = TrainConfig(**config_overrides(args, TrainConfig))
    result = pretrain(model_cfg, train_cfg, args.data, args.out, objective=args.objective, tokenizer=args.tokenizer,
                      resume=args.resume, stop_after=args.stop_after, device=args.device)
    print_result(result, args)


def run_encoder_preset(args) -> None:
    """Pre-train the encoder preset `args.model` (`cli/train/encoder.py`), the span flags refused."""
    refuse_kind_flags(args, SPAN_FLAGS, "encoder-decoder")
    run_encoder(args)


def refuse_kind_flags(args, flags: tuple[str, ...], kind: str) -> None:
    """One error line naming those of `flags` that were given: they apply to `kind` presets only."""
    given = [name for name in flags if getattr(args, name) is not None]
    if given:
        from lmlab.models.presets import names

        raise LmlabError(f"{', '.join('--' + f.replace('_', '-') for f in given)} apply to {kind} presets "
                         f"({', '.join(names(kind))}), not to {args.model}; drop them")


# --arch name -> the function that trains it from the parsed flags (`transformer`: a --model preset).
ARCHS = {"transformer": require_model, "ngram": ngram.run_train, "window": neural.run_window,
         "rnn": neural.run_rnn, "lstm": neural.run_rnn, "gru": neural.run_rnn}

# Family.recipe -> the function that trains a preset of that family from the parsed flags; the families
# of the other recipes train with their own command (Family.command).
PRESET_RUNNERS = {"pretrain": run_decoder, "pretrain_encoder": run_encoder_preset,
                  "pretrain_encoder_decoder": run_encoder_decoder, "neural_lm": neural.run_preset,
                  "ngram": ngram.run_preset}

# The flags each group of architectures adds; any other --arch refuses them.
ARCH_FLAGS = {("ngram",): ngram.TRAIN_FLAGS, ("window", "rnn", "lstm", "gru"): neural.NEURAL_FLAGS,
              ("transformer",): ("objective",) + ENCODER_FLAGS + SPAN_FLAGS}

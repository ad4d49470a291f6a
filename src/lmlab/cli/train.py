"""`lmlab train`: pre-train a language model, resumably. `--arch transformer` (the default) trains
a decoder preset with overrides; the other architectures (n-gram, window LM, RNNs) add their own
flag group and runner to ARCHS."""

from lmlab.cli import ngram, train_neural
from lmlab.cli.config_flags import add_config_flags, config_overrides
from lmlab.cli.train_encoder import ENCODER_FLAGS, add_encoder_flags, run_encoder
from lmlab.cli.train_result import print_result
from lmlab.cli.train_seq2seq import SPAN_FLAGS, add_seq2seq_flags, run_encoder_decoder
from lmlab.config import ENCODER_PRESETS, ModelConfig, TrainConfig, PRESETS
from lmlab.models.presets import family_of, preset
from lmlab.data.corpora import EMBEDDED
from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.config import ENCODER_DECODER_PRESETS
from lmlab.recipes.pretrain import pretrain


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("train", help="pre-train a language model (causal LM)",
                              description="Pre-train a decoder on text. Every model and training setting "
                                          "has a flag; unset ones keep the preset's / default value.")
    p.add_argument("--arch", choices=list(ARCHS), default="transformer",
                   help="model architecture (default transformer: a --model preset)")
    p.add_argument("--model", help=f"transformer preset: {', '.join(PRESETS)}; encoder: {', '.join(ENCODER_PRESETS)}; "
                                   f"encoder-decoder: {', '.join(ENCODER_DECODER_PRESETS)}")
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
    add_seq2seq_flags(p)
    ngram.add_train_flags(p)
    train_neural.add_arguments(p)
    p.set_defaults(run=run)


def run(args) -> None:
    arch = args.arch
    if arch == "transformer" and args.model is not None and family_of(args.model).kind == "classic":
        arch = classic_arch(args.model)  # `--model lstm-small` means --arch lstm with the preset's sizes
    for archs, names in ARCH_FLAGS.items():
        if arch not in archs:
            train_neural.refuse_flags(args, arch, names)
    if arch != args.arch:  # a classic preset
        return (ngram.run_preset if arch == "ngram" else train_neural.run_preset)(args)
    ARCHS[arch](args)


def run_transformer(args) -> None:
    if args.model is None:
        raise LmlabError(f"--model is required for --arch transformer; choose a preset: {', '.join(PRESETS)}")
    if args.model in ENCODER_DECODER_PRESETS:
        return run_encoder_decoder(args)
    given = [name for name in SPAN_FLAGS if getattr(args, name) is not None]
    if given:
        raise LmlabError(f"{', '.join('--' + f.replace('_', '-') for f in given)} apply to encoder-decoder presets "
                         f"({', '.join(ENCODER_DECODER_PRESETS)}), not to {args.model}; drop them")
    if args.model in ENCODER_PRESETS:
        return run_encoder(args)
    if any(getattr(args, name) is not None for name in ENCODER_FLAGS):
        raise LmlabError(f"--objective, --whole-word-masking, --masking, --embedding-size and --generator-divisor "
                         f"apply to encoder presets ({', '.join(ENCODER_PRESETS)}), not to decoder {args.model}; "
                         "drop them")
    model_cfg = preset(args.model, **config_overrides(args, ModelConfig))
    train_cfg = TrainConfig(**config_overrides(args, TrainConfig))
    result = pretrain(model_cfg, train_cfg, args.data, args.out, tokenizer=args.tokenizer, resume=args.resume,
                      stop_after=args.stop_after, device=args.device)
    print_result(result, args.out)


def classic_arch(name: str) -> str:
    """The --arch a classic preset trains as (window, rnn, lstm, gru or ngram); the other classic
    families train with their own commands."""
    family, cfg = family_of(name).name, preset(name)
    if family in ("window", "ngram"):
        return family
    if family == "rnn":
        return cfg.cell
    command = {"seq2seq-rnn": "seq2seq", "elmo": "elmo", "word2vec": "word2vec"}[family]
    raise LmlabError(f"{name} is a {family} preset, which `lmlab train` does not train; use `lmlab {command} train`")


# --arch name -> the function that trains it from the parsed flags.
ARCHS = {"transformer": run_transformer, "ngram": ngram.run_train, "window": train_neural.run_window,
         "rnn": train_neural.run_rnn, "lstm": train_neural.run_rnn, "gru": train_neural.run_rnn}

# The flags each group of architectures adds; any other --arch refuses them.
ARCH_FLAGS = {("ngram",): ngram.TRAIN_FLAGS, ("window", "rnn", "lstm", "gru"): train_neural.NEURAL_FLAGS,
              ("transformer",): ENCODER_FLAGS + SPAN_FLAGS}

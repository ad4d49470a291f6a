"""The encoder half of `lmlab train`: `--model bert-tiny|roberta-tiny|albert-tiny|electra-tiny|deberta-tiny|…`
pre-trains an encoder preset with `--objective` (an encoder objective of `objectives.registry`). `cli.train`
adds these flags (and `--objective`, which every kind of preset takes) and hands encoder presets to
`run_encoder`."""

import dataclasses

from lmlab.cli.common.config_flags import config_overrides
from lmlab.cli.train.result import say_vocabulary_shortfall
from lmlab.config import EncoderConfig, ModelConfig, TrainConfig
from lmlab.errors import LmlabError

ENCODER_FLAGS = ("whole_word_masking", "masking", "embedding_size", "generator_divisor")  # ours


def add_encoder_flags(p) -> None:
    """--whole-word-masking, --masking and the encoder-only model settings."""
    group = p.add_argument_group("encoder pre-training (the encoder presets, listed under --model)")
    group.add_argument("--whole-word-masking", action="store_true", default=None, help="mask whole words, never single pieces")
    group.add_argument("--masking", choices=["static", "dynamic"],
                       help="draw each example's mask once (BERT) or every epoch (RoBERTa); default: the family's")
    group.add_argument("--embedding-size", dest="embedding_size", type=int, metavar="INT",
                       help="ALBERT / ELECTRA: token-embedding width E, projected to --d-model")
    group.add_argument("--generator-divisor", dest="generator_divisor", type=int, metavar="INT",
                       help="ELECTRA: the generator is this many times narrower than the discriminator "
                            "(DeBERTa --objective rtd: this many times shallower)")


def run_encoder(args) -> None:
    """Pre-train the encoder preset `args.model` with the flags' objective and settings."""
    from lmlab.models.presets import preset
    from lmlab.recipes.pretrain_encoder import pretrain_encoder

    encoder_fields = {f.name for f in dataclasses.fields(EncoderConfig)}
    foreign = sorted(name for name in config_overrides(args, ModelConfig) if name not in encoder_fields)
    if foreign:
        raise LmlabError(f"{', '.join('--' + f.replace('_', '-') for f in foreign)} do not apply to encoder "
                         f"preset {args.model}; drop them")
    model_cfg = preset(args.model, **config_overrides(args, EncoderConfig))
    result = pretrain_encoder(model_cfg, TrainConfig(**config_overrides(args, TrainConfig)), args.data, args.out,
                              objective=args.objective, whole_word=bool(args.whole_word_masking), masking=args.masking,
                              tokenizer=args.tokenizer, resume=args.resume, stop_after=args.stop_after,
                              device=args.device)
    say_vocabulary_shortfall(args)
    if not result.finished:
        print(f"stopped at step {result.step}; a checkpoint is in {args.out}/checkpoints. "
              f"Continue with: lmlab train … --out {args.out} --resume")
        return
    scores = ", ".join(f"{k.removeprefix('val_')} {result.before.get(k, float('nan')):.3f} -> {v:.3f}"
                       for k, v in result.after.items() if k.endswith("_acc"))
    print(f"done: {result.step} steps; held-out {scores}. Model saved to {result.model_dir}")


"""`lmlab finetune --task text-to-text`: fine-tune an encoder-decoder (T5, BART, the original Transformer)
on (source, target) pairs. `cli.finetune` owns the command; it adds these flags and hands
`--task text-to-text` to `run`. Flags of one kind of task given to the other are refused in one line."""

import sys
import warnings

from lmlab.cli.common.config_flags import add_config_flags, config_overrides, flag_fields
from lmlab.data.pair_tasks import TASKS
from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.config import ENCODER_DECODER_PRESETS
from lmlab.training.recipe_configs import PER_EPOCH, EncoderDecoderFinetuneConfig, EncoderFinetuneConfig

TASK = "text-to-text"
PAIRS_HELP = (f"--task {TASK}: --data is a CSV/JSONL file with 'source' and 'target' columns, or a task generated "
              f"in code: {', '.join(TASKS)} (written-out numbers -> digits); --model an encoder-decoder preset "
              f"({', '.join(ENCODER_DECODER_PRESETS)}), trained from scratch, or a T5 / BART / Marian directory")


ENCODER_ONLY = sorted(flag_fields(EncoderFinetuneConfig) - flag_fields(EncoderDecoderFinetuneConfig)
                      | {"text_column", "pair_column", "label_column"})
TEXT_TO_TEXT_ONLY = sorted(flag_fields(EncoderDecoderFinetuneConfig) - flag_fields(EncoderFinetuneConfig)
                           | set(PER_EPOCH))


def add_encoder_decoder_flags(p) -> None:
    """One flag per `EncoderDecoderFinetuneConfig` setting that the encoder tasks do not already have."""
    group = p.add_argument_group(f"encoder-decoder settings (--task {TASK} only)")
    add_config_flags(group, EncoderDecoderFinetuneConfig,
                     skip=flag_fields(EncoderFinetuneConfig) - set(PER_EPOCH) | {"fsdp"})


def refuse_flags(args, names: list[str], task: str) -> None:
    """One error line naming the flags among `names` that were given but `--task task` does not use."""
    given = [name for name in names if getattr(args, name, None) is not None]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        verb, pronoun = ("does", "it") if len(given) == 1 else ("do", "them")
        raise LmlabError(f"{flags} {verb} not apply to --task {task}; drop {pronoun}")


def run(args) -> None:
    """Fine-tune `args.model` on the pairs of `args.data` and print how it went."""
    from lmlab.recipes.finetune_encoder_decoder import finetune_encoder_decoder

    refuse_flags(args, ENCODER_ONLY, TASK)
    cfg = EncoderDecoderFinetuneConfig(**config_overrides(args, EncoderDecoderFinetuneConfig))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = _one_line_warning
        result = finetune_encoder_decoder(args.model, args.data, args.out, args.eval, cfg, args.tokenizer, args.resume,
                                          args.stop_after, args.device)
    if not result.finished:
        print(f"stopped at step {result.step}; a checkpoint is in {args.out}/checkpoints. "
              f"Continue with: lmlab finetune --task {TASK} … --out {args.out} --resume")
        return
    print(f"done: {result.step} steps")
    for name, label in (("val_loss", "validation loss"), ("val_seq_acc", "validation sequence accuracy")):
        print(f"  {label}: {result.before[name]:.3f} -> {result.after[name]:.3f}")
    if result.test:
        print(f"  test sequence accuracy: {result.test['test_seq_acc']:.3f} ({result.test['test_n']} pairs, greedy)")
    print(f"model saved to {result.model_dir} (load it with lmlab.models.encoder_decoder.files.load_encoder_decoder)")


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"lmlab: warning: {message}", file=sys.stderr)

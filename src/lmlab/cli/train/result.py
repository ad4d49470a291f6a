"""The last lines `lmlab train` prints, whatever the architecture: where the model is, or how to go on."""

from pathlib import Path

from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, warn_if_smaller


def print_result(result, args) -> None:
    """`result` has step, val_loss (None when a resumed run had no step left to validate after) and
    model_dir (None when the run stopped early, with a checkpoint)."""
    out = args.out
    say_vocabulary_shortfall(args)
    if result.model_dir is None:
        print(f"stopped at step {result.step}; a checkpoint is in {out}/checkpoints. "
              f"Continue with: lmlab train … --out {out} --resume")
    else:
        loss = "" if result.val_loss is None else f", validation loss {result.val_loss:.4f}"
        print(f"done: {result.step} steps{loss}. Model saved to {result.model_dir}")


def say_vocabulary_shortfall(args) -> None:
    """Warn when the run trained its tokenizer to a `--vocab-size` the user gave and the text could not
    fill it; a preset's own size is only a ceiling, and falling short of it is not news."""
    trained = Path(args.out) / TOKENIZER_FILE
    if args.vocab_size is not None and args.tokenizer is None and trained.is_file():
        warn_if_smaller(load_tokenizer(trained).get_vocab_size(), args.vocab_size)

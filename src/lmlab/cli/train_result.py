"""The last lines `lmlab train` prints, whatever the architecture: where the model is, or how to go on."""


def print_result(result, out) -> None:
    """`result` has step, val_loss (None when a resumed run had no step left to validate after) and
    model_dir (None when the run stopped early, with a checkpoint)."""
    if result.model_dir is None:
        print(f"stopped at step {result.step}; a checkpoint is in {out}/checkpoints. "
              f"Continue with: lmlab train … --out {out} --resume")
    else:
        loss = "" if result.val_loss is None else f", validation loss {result.val_loss:.4f}"
        print(f"done: {result.step} steps{loss}. Model saved to {result.model_dir}")

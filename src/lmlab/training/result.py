"""What a pre-training run returns when it finishes or stops."""

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PretrainResult:
    step: int
    val_loss: float | None
    model_dir: Path | None  # None when the run stopped early (Ctrl-C, --stop-after)
    interrupted: bool

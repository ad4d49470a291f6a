"""What a run leaves to look at: metrics.jsonl and loss.png (its progress bar is `lmlab.progress`)."""

import json
from pathlib import Path

from lmlab.figures import save_line_plot
from lmlab.io.atomic import append_bytes, atomic_write_text

LOSS_CURVES = {"train loss": "loss", "validation loss": "val_loss"}


class MetricsLog:
    """Append-only JSONL of training metrics, one object per logged step."""

    def __init__(self, path: Path, resume_step: int | None = None):
        """Open `path`; when resuming at `resume_step`, drop lines logged after that step (the run
        that wrote them died before its next checkpoint, so they will be logged again)."""
        self.path = path
        if resume_step is not None and path.exists():
            kept = [line for line in path.read_text().splitlines()
                    if line.strip() and json.loads(line)["step"] <= resume_step]
            atomic_write_text(path, "".join(line + "\n" for line in kept))
        elif resume_step is None:
            path.unlink(missing_ok=True)

    def write(self, **metrics) -> None:
        append_bytes(self.path, (json.dumps(metrics) + "\n").encode())

    def read(self) -> list[dict]:
        return read_metrics(self.path)


def read_metrics(path: Path) -> list[dict]:
    """The rows of a run's metrics.jsonl ([] before there is one)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def save_loss_curve(rows: list[dict], path: Path, curves: dict[str, str] = LOSS_CURVES,
                    ylabel: str = "loss (nats/token)") -> None:
    """Plot metrics `rows` (from `MetricsLog.read`) as a PNG: one line per entry of `curves`
    (legend name -> metric key), over the rows that have that key. Nothing is written without data."""
    series = {}
    for name, key in curves.items():
        points = [(row["step"], row[key]) for row in rows if key in row]
        if points:
            series[name] = tuple(zip(*points))
    if series:
        save_line_plot(path, series, title="Training curve", xlabel="step", ylabel=ylabel)

"""Figures: lmlab's own rasteriser (`lmlab.figures`) against matplotlib (Agg), the numbers behind the choice
in docs/development.md ("Figures").

Both sides draw the same loss curve (a training run's loss every 10 steps and its validation loss every
100) and the same attention heatmap (a causal 48x48 map with a label per token), each in a fresh Python
process, and report: the import time (median of --rounds fresh processes), the time to draw and save each
figure (median of --rounds, after one warm-up), and the PNGs themselves, written under
benchmarks/results/figures/ to be looked at side by side. The install size is what matplotlib would add to
lmlab's dependencies (numpy, packaging and python-dateutil are there already): its own wheel and
contourpy, cycler, fonttools, kiwisolver, pyparsing and pillow, as wheels (--wheels, a `pip download`
folder) and installed. matplotlib is read from --matplotlib, a `pip install --target` folder, so the
project's environment stays without it:

  pip download matplotlib contourpy cycler fonttools kiwisolver pyparsing pillow --no-deps -d /tmp/mplwheels
  pip install --no-index --no-deps --target /tmp/mpl /tmp/mplwheels/*.whl
  python benchmarks/figures.py --matplotlib /tmp/mpl --wheels /tmp/mplwheels
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results" / "figures.json"
PICTURES = Path(__file__).parent / "results" / "figures"
ADDED = ["matplotlib", "contourpy", "cycler", "fonttools", "kiwisolver", "pyparsing", "pillow"]
IMPORTS = {
    "numpy (both need it)": "import numpy",
    "lmlab.figures": "import lmlab.figures",
    "matplotlib (Agg)": "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot",
}


def loss_curve() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A run's losses: train every 10 steps for 2000 steps, noisy; validation every 100 steps."""
    rng = np.random.default_rng(0)
    steps = np.arange(0, 2001, 10)
    train = 2.2 + 4.0 * np.exp(-steps / 300) + 0.08 * rng.standard_normal(len(steps))
    val_steps = steps[::10]
    return {"train loss": (steps, train), "validation loss": (val_steps, 2.35 + 4.0 * np.exp(-val_steps / 320))}


def attention_map() -> tuple[np.ndarray, list[str]]:
    """A causal (48, 48) attention map (rows sum to 1) and its tokens' labels."""
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((48, 48)) * 2 + np.eye(48, k=-1) * 4  # (T, T), a previous-token head
    scores[np.triu_indices(48, k=1)] = -np.inf
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True), [f"tok{i}" for i in range(48)]


def draw_lmlab(out: Path) -> dict[str, Callable[[], object]]:
    """lmlab's two figures, each a function that draws and saves it into `out`."""
    from lmlab.figures import save_heatmap, save_line_plot  # imported here: the child process times its side

    series, (matrix, labels) = loss_curve(), attention_map()
    return {
        "loss curve": lambda: save_line_plot(out / "loss_lmlab.png", series, title="loss", xlabel="step",
                                             ylabel="nats", size=(640, 400)),
        "attention heatmap": lambda: save_heatmap(out / "attention_lmlab.png", matrix, labels, labels,
                                                  title="layer 0, head 0", value_range=(0.0, 1.0)),
    }


def draw_matplotlib(out: Path) -> dict[str, Callable[[], object]]:
    """The same two figures with matplotlib's Agg backend, as near lmlab's sizes as its layout allows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series, (matrix, labels) = loss_curve(), attention_map()

    def curve():
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)  # 640 x 400 pixels, as lmlab's
        for name, (xs, ys) in series.items():
            ax.plot(xs, ys, label=name)
        ax.set(title="loss", xlabel="step", ylabel="nats")
        ax.grid(color="#e4e4e4")
        ax.legend()
        fig.savefig(out / "loss_matplotlib.png")
        plt.close(fig)

    def heatmap():
        fig, ax = plt.subplots(figsize=(10.4, 10.0), dpi=100)  # about lmlab's size for 48 cells of 20 px
        image = ax.imshow(matrix, cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.xaxis.tick_top()
        ax.set_title("layer 0, head 0")
        fig.colorbar(image, ax=ax, fraction=0.04)
        fig.savefig(out / "attention_matplotlib.png")
        plt.close(fig)

    return {"loss curve": curve, "attention heatmap": heatmap}


def draw_times(side: str, out: Path, rounds: int) -> dict[str, float]:
    """In this process: the median seconds of each figure drawn and saved `rounds` times after a warm-up."""
    figures = (draw_lmlab if side == "lmlab" else draw_matplotlib)(out)
    medians = {}
    for name, draw in figures.items():
        draw()
        seconds = []
        for _ in range(rounds):
            start = time.perf_counter()
            draw()
            seconds.append(time.perf_counter() - start)
        medians[name] = statistics.median(seconds)
    return medians


def fresh(argv: list[str], matplotlib_path: str) -> str:
    """The last line that `python *argv` prints, run in a new process that also sees `matplotlib_path`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (matplotlib_path, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, *argv], env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1]


def import_seconds(statement: str, matplotlib_path: str, rounds: int) -> float:
    """The median seconds `statement` takes in a fresh process (the interpreter's own start not counted)."""
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    return statistics.median(float(fresh(["-c", code], matplotlib_path)) for _ in range(rounds))


def installed_bytes(name: str, path: str) -> int:
    """The bytes distribution `name`'s files take where it is installed under `path`."""
    dist = next(metadata.distributions(name=name, path=[path]))
    return sum(file.locate().stat().st_size for file in dist.files if file.locate().is_file())


def sizes(matplotlib_path: str, wheels: Path | None) -> dict[str, dict[str, int]]:
    """Per added distribution: its wheel's bytes (when --wheels is given) and its installed bytes."""
    table = {}
    for name in ADDED:
        wheel = [w.stat().st_size for w in (wheels or Path("/nonexistent")).glob(f"{name}-*.whl")]
        table[name] = {"wheel": wheel[0] if wheel else None, "installed": installed_bytes(name, matplotlib_path)}
    source = Path(__file__).parents[1] / "src" / "lmlab" / "figures"
    table["lmlab.figures (source)"] = {"wheel": None, "installed": sum(p.stat().st_size for p in source.glob("*.py"))}
    return table


def megabytes(n: int | None) -> str:
    return "" if n is None else f"{n / 1e6:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matplotlib", required=True, help="the folder matplotlib is installed in (pip --target)")
    parser.add_argument("--wheels", type=Path, help="the folder `pip download` saved the wheels in")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--side", choices=["lmlab", "matplotlib"], help=argparse.SUPPRESS)  # a child process's
    args = parser.parse_args()
    if args.side:
        print(json.dumps(draw_times(args.side, PICTURES, args.rounds)))
        return
    import torch

    from machine import device_name  # imports torch: only here, never in the measured child processes

    PICTURES.mkdir(parents=True, exist_ok=True)
    imports = {name: import_seconds(statement, args.matplotlib, args.rounds) for name, statement in IMPORTS.items()}
    draws = {side: json.loads(fresh([__file__, "--side", side, "--matplotlib", args.matplotlib,
                                     "--rounds", str(args.rounds)], args.matplotlib))
             for side in ("lmlab", "matplotlib")}
    table = sizes(args.matplotlib, args.wheels)
    machine = device_name(torch.device("cpu"))

    print(f"{machine}, {os.cpu_count()} cores, Python {platform.python_version()}, median of {args.rounds}")
    print(f"\n{'what matplotlib adds':<24} {'wheel MB':>9} {'installed MB':>13}")
    for name, row in table.items():
        print(f"{name:<24} {megabytes(row['wheel']):>9} {megabytes(row['installed']):>13}")
    added = [row for name, row in table.items() if name in ADDED]
    print(f"{'total added':<24} {megabytes(sum(r['wheel'] or 0 for r in added)):>9} "
          f"{megabytes(sum(r['installed'] for r in added)):>13}")
    print(f"\n{'import':<24} {'ms':>9}")
    for name, seconds in imports.items():
        print(f"{name:<24} {seconds * 1e3:>9.1f}")
    print(f"\n{'draw and save (ms)':<24} {'lmlab':>9} {'matplotlib':>11}")
    for figure in draws["lmlab"]:
        print(f"{figure:<24} {draws['lmlab'][figure] * 1e3:>9.1f} {draws['matplotlib'][figure] * 1e3:>11.1f}")
    print(f"\npictures side by side: {PICTURES}/*_lmlab.png, *_matplotlib.png")
    RESULTS.write_text(json.dumps({"machine": machine, "cores": os.cpu_count(), "python": platform.python_version(),
                                   "rounds": args.rounds, "sizes_bytes": table, "import_seconds": imports,
                                   "draw_seconds": draws}, indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()

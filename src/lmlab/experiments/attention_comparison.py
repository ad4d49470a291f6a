"""Do efficient attention methods transfer? Each method trains the same decoder on the same data for the same
steps, in the spirit of Narang et al. (2021, "Do Transformer Modifications Transfer..."), on two tasks:
language modelling on long blocks (held-out loss, training tokens/s) and the copy task of
`lmlab.data.copy_task` (held-out accuracy at copying a string from half a block back: the long-range
retrieval that language modelling on code hardly asks for).

Every language-modelling run is a normal pre-training run in DIR/runs/METHOD with one shared tokenizer (the
first run trains it), the same seed, batches and schedule; only `attention` differs; the copy-task runs are
in DIR/runs/copy-METHOD. Written to DIR: attention_comparison.json, .md (the table, also printed), .png
(validation loss against step) and _copy.png (copy accuracy against step).
"""

import dataclasses
import json
import statistics
from pathlib import Path

from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.experiments.settings import AttentionComparisonSettings
from lmlab.figures import save_line_plot
from lmlab.io.atomic import atomic_write_text
from lmlab.io.outputs import check_run_dir
from lmlab.models.presets import preset
from lmlab.recipes.copy_task import CopyTaskConfig, train_copy
from lmlab.recipes.pretrain import pretrain
from lmlab.tokenizers.bpe import TOKENIZER_FILE
from lmlab.training.progress import read_metrics

RESULTS = "attention_comparison"


def compare_attention(out: str | Path, s: AttentionComparisonSettings = AttentionComparisonSettings(),
                      show_progress: bool = True) -> dict:
    """Train one run per method into `out`/runs and return what attention_comparison.json holds."""
    out = Path(out)
    if (out / f"{RESULTS}.json").exists() or (out / "runs").exists():
        raise LmlabError(f"'{out}' already holds a comparison; choose a new --out directory")
    check_run_dir(out)
    train = TrainConfig(loop=LoopConfig(max_steps=s.max_steps, batch_size=s.batch_size,
                                        eval_every=max(1, s.max_steps // 6), checkpoint_every=s.max_steps,
                                        keep_checkpoints=1, log_every=max(1, s.max_steps // 30), seed=s.seed),
                        block_size=s.block_size, optim=OptimConfig(lr=s.lr, warmup_steps=min(100, s.max_steps // 10)),
                        eval_batches=8)
    base = preset(s.model).replace(n_layers=s.n_layers, d_model=s.d_model, n_heads=s.d_model // 32,
                                   n_kv_heads=None, d_ff=4 * s.d_model if preset(s.model).ffn == "gelu"
                                   else 8 * s.d_model // 3 // 8 * 8, vocab_size=s.vocab_size,
                                   context_length=s.block_size, attention_window=s.attention_window,
                                   attention_rank=s.attention_rank, attention_hashes=s.attention_hashes)
    results, tokenizer = {}, None
    for method in s.methods:
        run = out / "runs" / method
        result = pretrain(base.replace(attention=method), train, s.data, run, tokenizer=tokenizer,
                          show_progress=show_progress)
        tokenizer = tokenizer or run / TOKENIZER_FILE
        rows = read_metrics(run / "metrics.jsonl")
        results[method] = {"val_loss": result.val_loss, "tokens_per_s": _median_speed(rows),
                           "val_curve": [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]}
        if s.copy_steps:
            results[method] |= _copy_task(base.replace(attention=method), s, out / "runs" / f"copy-{method}",
                                          show_progress)
    report = {"settings": dataclasses.asdict(s) | {"methods": list(s.methods)}, "results": results}
    atomic_write_text(out / f"{RESULTS}.json", json.dumps(report, indent=2))
    atomic_write_text(out / f"{RESULTS}.md", results_table(report))
    save_line_plot(out / f"{RESULTS}.png", {m: tuple(zip(*r["val_curve"])) for m, r in results.items()},
                   title=f"Held-out loss, {s.block_size}-token blocks", xlabel="step",
                   ylabel="loss (nats/token)", size=(900, 600))
    if s.copy_steps:
        save_line_plot(out / f"{RESULTS}_copy.png", {m: tuple(zip(*r["copy_curve"])) for m, r in results.items()},
                       title=f"Copy task, {s.block_size // 2 + 1} tokens back", xlabel="step",
                       ylabel="held-out accuracy", size=(900, 600))
    return report


def _copy_task(model_cfg, s: AttentionComparisonSettings, run: Path, show_progress: bool) -> dict:
    """One method's copy-task run: its last held-out accuracy, training tokens/s and accuracy curve."""
    cfg = CopyTaskConfig(length=s.block_size, symbols=s.copy_symbols,
                         loop=LoopConfig(max_steps=s.copy_steps, batch_size=s.batch_size, seed=s.seed),
                         optim=OptimConfig(lr=s.lr, warmup_steps=min(100, s.copy_steps // 10)))
    measures = train_copy(model_cfg, cfg, run, show_progress=show_progress)
    rows = read_metrics(run / "metrics.jsonl")
    return {"copy_accuracy": measures["val_copy_accuracy"], "copy_tokens_per_s": _median_speed(rows),
            "copy_curve": [(r["step"], r["val_copy_accuracy"]) for r in rows if "val_copy_accuracy" in r]}


def _median_speed(rows: list[dict]) -> float:
    return statistics.median(r["tokens_per_s"] for r in rows if "tokens_per_s" in r)


def results_table(report: dict) -> str:
    """A markdown table: each method's held-out loss, its gap to full attention and its training speed, and
    its copy-task accuracy when the comparison ran the copy task."""
    results, s = report["results"], report["settings"]
    full = results.get("full", {}).get("val_loss")
    copy = bool(s["copy_steps"])
    copy_header = (f" copy accuracy ({s['copy_steps']} steps, {s['block_size'] // 2 + 1} tokens back, chance "
                   f"{1 / s['copy_symbols']:.3f}) |") if copy else ""
    lines = [f"| attention ({s['max_steps']} steps of {s['batch_size']} x {s['block_size']} tokens on {s['data']}) | "
             f"held-out loss | vs full | training tokens/s |{copy_header}", "|---|---:|---:|---:|" + "---:|" * copy]
    for method, r in results.items():
        gap = "" if full is None or method == "full" else f"{r['val_loss'] - full:+.3f}"
        accuracy = f" {r['copy_accuracy']:.3f} |" if copy else ""
        lines.append(f"| {method} | {r['val_loss']:.3f} | {gap} | {r['tokens_per_s']:,.0f} |{accuracy}")
    return "\n".join(lines) + "\n"

"""Do efficient attention methods transfer? Each method trains the same decoder on the same data for the same
steps, in the spirit of Narang et al. (2021, "Do Transformer Modifications Transfer..."): language modelling on
long blocks, held-out loss and training tokens/s per method.

Every run is a normal pre-training run in DIR/runs/METHOD with one shared tokenizer (the first run trains it),
the same seed, batches and schedule; only `attention` differs. Written to DIR: attention_comparison.json,
.md (the table, also printed) and .png (validation loss against step).
"""

import dataclasses
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from lmlab.config import OptimConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.eval.plot import save_line_plot
from lmlab.io.atomic import atomic_write_text
from lmlab.io.outputs import check_run_dir
from lmlab.models.presets import kind, preset
from lmlab.recipes.pretrain import pretrain
from lmlab.tokenizers.bpe import TOKENIZER_FILE

RESULTS = "attention_comparison"
CAUSAL_METHODS = ("full", "window", "bigbird", "lsh", "performer")


@dataclass(frozen=True)
class AttentionComparisonSettings:
    """The methods, the model and data they share, and the training budget each gets."""

    methods: tuple[str, ...] = CAUSAL_METHODS
    data: str = "stdlib"
    model: str = "llama-tiny"
    n_layers: int = 2
    d_model: int = 128
    block_size: int = 1024  # tokens per training sequence: long enough for the methods to differ
    max_steps: int = 300
    batch_size: int = 4
    lr: float = 2e-3
    vocab_size: int = 2048
    attention_window: int = 128
    attention_rank: int = 64
    attention_hashes: int = 2
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "methods", tuple(self.methods))
        unknown = [m for m in self.methods if m not in CAUSAL_METHODS]
        if unknown or not self.methods:
            raise LmlabError(f"--methods {unknown or '(none)'}: a decoder compares causal methods, choose from "
                             f"{', '.join(CAUSAL_METHODS)}")
        if kind(self.model) != "decoder":
            raise LmlabError(f"--model {self.model} is not a decoder preset; choose gpt2-tiny or llama-tiny, say")


def compare_attention(out: str | Path, s: AttentionComparisonSettings = AttentionComparisonSettings(),
                      show_progress: bool = True) -> dict:
    """Train one run per method into `out`/runs and return what attention_comparison.json holds."""
    out = Path(out)
    if (out / f"{RESULTS}.json").exists() or (out / "runs").exists():
        raise LmlabError(f"'{out}' already holds a comparison; choose a new --out directory")
    check_run_dir(out)
    train = TrainConfig(max_steps=s.max_steps, batch_size=s.batch_size, block_size=s.block_size,
                        optim=OptimConfig(lr=s.lr, warmup_steps=min(100, s.max_steps // 10)),
                        eval_every=max(1, s.max_steps // 6), eval_batches=8, checkpoint_every=s.max_steps,
                        keep_checkpoints=1, log_every=max(1, s.max_steps // 30), seed=s.seed)
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
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        results[method] = {"val_loss": result.val_loss,
                           "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows if "tokens_per_s" in r),
                           "val_curve": [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]}
    report = {"settings": dataclasses.asdict(s) | {"methods": list(s.methods)}, "results": results}
    atomic_write_text(out / f"{RESULTS}.json", json.dumps(report, indent=2))
    atomic_write_text(out / f"{RESULTS}.md", results_table(report))
    save_line_plot(out / f"{RESULTS}.png", {m: tuple(zip(*r["val_curve"])) for m, r in results.items()},
                   title=f"Held-out loss, {s.block_size}-token blocks", xlabel="step",
                   ylabel="loss (nats/token)", size=(900, 600))
    return report


def results_table(report: dict) -> str:
    """A markdown table: each method's held-out loss, its gap to full attention and its training speed."""
    results, s = report["results"], report["settings"]
    full = results.get("full", {}).get("val_loss")
    lines = [f"| attention ({s['max_steps']} steps of {s['batch_size']} x {s['block_size']} tokens on {s['data']}) | "
             "held-out loss | vs full | training tokens/s |", "|---|---:|---:|---:|"]
    for method, r in results.items():
        gap = "" if full is None or method == "full" else f"{r['val_loss'] - full:+.3f}"
        lines.append(f"| {method} | {r['val_loss']:.3f} | {gap} | {r['tokens_per_s']:,.0f} |")
    return "\n".join(lines) + "\n"

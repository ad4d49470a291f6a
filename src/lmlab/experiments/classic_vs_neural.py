"""Classic against neural language models on the same text, tokens and held-out documents: where (or
whether) the neural models overtake Kneser-Ney as they see more text.

Every model reads the same tokens (one byte-level BPE trained on `data`) and is scored on the same held-out
stream, each in its own context, by `eval.perplexity.perplexity`: the n-grams and the window LM in windows
long enough to give every token its full history (exact), the LSTM and GRU in windows of 4 blocks read
with a stride of 2 (every token has at least 2 blocks of history), the transformer in windows of the block
it trained on, with a stride of half of one. The held-out stream is another corpus's documents (`held_out`:
whole books no model trained on, for `kjv`), else the validation blocks of `data`'s own split, end to end.

The curves are held-out perplexity against training tokens. An n-gram model at x tokens counts x tokens of
training blocks drawn at random (so it stops at the corpus's size: it reads the text once); a neural model
at x tokens is its checkpoint after x / (batch x block) steps (it reads the text for as many epochs as
the budget buys). Every neural run is a normal training run in DIR/runs/NAME, its curve saved beside it
(heldout.json) once scored; the n-gram models are counted in memory. The same call again continues a comparison
that was stopped (Ctrl-C, or a machine that went away): finished runs are read back, a stopped one resumes from
its last checkpoint. Written to DIR: classic_vs_neural.json, .md (the table, also printed) and .png.
"""

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.data.blocks import gather, split_blocks
from lmlab.data.corpora import load_corpus
from lmlab.data.tokens import tokenize_corpus
from lmlab.errors import LmlabError
from lmlab.eval.perplexity import perplexity
from lmlab.experiments.settings import LABELS, NGRAMS, ClassicVsNeuralSettings
from lmlab.figures import save_line_plot
from lmlab.io.atomic import atomic_write_text
from lmlab.io.json_file import read_json_object
from lmlab.io.outputs import check_run_dir
from lmlab.models import registry
from lmlab.models.ngram.fit import fit_ngram
from lmlab.models.presets import preset
from lmlab.models.rnn.config import RNNConfig
from lmlab.models.window.config import WindowConfig
from lmlab.progress import progress_bar
from lmlab.recipes.neural_lm import train_neural_lm
from lmlab.recipes.ngram import training_runs
from lmlab.recipes.pretrain import pretrain
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, save_tokenizer, train_bpe
from lmlab.training.checkpoint import list_checkpoints, load_checkpoint
from lmlab.training.loop import load_trainable

RESULTS = "classic_vs_neural"
SETTINGS = f"{RESULTS}_settings.json"  # written first: what a second call must match to continue


def compare_classic_neural(out: str | Path, s: ClassicVsNeuralSettings = ClassicVsNeuralSettings(),
                           show_progress: bool = True) -> dict | None:
    """Train and score every method of `s` into `out` (or continue there); return what classic_vs_neural.json
    holds, or None when a neural run was stopped (Ctrl-C: the same call again continues)."""
    out = Path(out)
    texts = load_corpus(s.data)
    held_out_texts = load_corpus(s.held_out) if s.held_out else None  # both read before anything is written
    tokenizer = _continue_or_start(out, s, texts)
    tokens = tokenize_corpus(texts, tokenizer)
    split = split_blocks(tokens, s.block_size, TrainConfig.val_fraction, s.seed)
    if held_out_texts is not None:
        scored = torch.from_numpy(np.asarray(tokenize_corpus(held_out_texts, tokenizer), dtype=np.int64))
    else:
        scored = gather(tokens, np.sort(split.val_blocks), s.block_size)[:, :-1].reshape(-1)  # (n,) blocks end to end
    results = {}
    for name in s.methods:
        start = time.perf_counter()
        if name in NGRAMS:
            curve = _ngram_curve(name, tokens, split.train_blocks, tokenizer.get_vocab_size(), scored, s,
                                 show_progress)
            seconds = time.perf_counter() - start
        else:
            scored_run = _neural_curve(name, out, scored, tokenizer.get_vocab_size(), s, show_progress)
            if scored_run is None:
                print(f"classic-vs-neural: stopped during {name}; run the same command again to continue",
                      file=sys.stderr)
                return None
            curve, seconds = scored_run["curve"], scored_run["seconds"]
        results[name] = {"label": LABELS[name], "curve": curve, "tokens": curve[-1][0], "ppl": curve[-1][1],
                         "seconds": seconds}
    report = {"settings": _settings_dict(s),
              "train_tokens": int(len(split.train_blocks) * s.block_size), "scored_tokens": int(scored.numel() - 1),
              "results": results}
    atomic_write_text(out / f"{RESULTS}.json", json.dumps(report, indent=2))
    atomic_write_text(out / f"{RESULTS}.md", results_table(report))
    save_line_plot(out / f"{RESULTS}.png", {r["label"]: tuple(zip(*r["curve"])) for r in results.values()},
                   title=f"Held-out perplexity ({s.held_out or s.data + ' validation blocks'})",
                   xlabel="training tokens read", ylabel="perplexity", log_x=True, log_y=True, size=(1000, 800))
    return report


def _settings_dict(s: ClassicVsNeuralSettings) -> dict:
    """The settings as JSON holds them: what the report shows and what a second call must match."""
    return dataclasses.asdict(s) | {"methods": list(s.methods)}


def _continue_or_start(out: Path, s: ClassicVsNeuralSettings, texts: list[str]):
    """The comparison's tokenizer: read back when `out` holds this comparison unfinished, else trained on `texts`
    and saved with the settings into a new `out`."""
    settings = _settings_dict(s)
    if (out / f"{RESULTS}.json").exists():
        raise LmlabError(f"'{out}' already holds a finished comparison; choose a new --out directory")
    if (out / SETTINGS).is_file():
        saved = read_json_object(out / SETTINGS, "choose a new --out directory")
        if saved != settings:
            changed = sorted(k for k, v in settings.items() if saved.get(k) != v)
            raise LmlabError(f"'{out}' holds a comparison started with other settings ({', '.join(changed)}); run "
                             "it with the same flags to continue, or choose a new --out directory")
        return load_tokenizer(out / TOKENIZER_FILE)
    check_run_dir(out)
    if out.is_dir() and any(out.iterdir()):
        raise LmlabError(f"'{out}' is not empty and holds no comparison; choose a new --out directory")
    tokenizer = train_bpe(texts, s.vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    save_tokenizer(tokenizer, out)
    atomic_write_text(out / SETTINGS, json.dumps(settings, indent=2))
    return tokenizer


def _ngram_curve(name: str, tokens, train_blocks: np.ndarray, vocab_size: int, scored: torch.Tensor,
                 s: ClassicVsNeuralSettings, show_progress: bool) -> list[tuple[int, float]]:
    """(training tokens, held-out perplexity) of the n-gram model counted on growing shares of the training
    blocks: s.points shares, each twice the one before, the last all of them. A share is the first blocks of one
    seeded shuffle, as the neural models draw theirs from the whole text: the first blocks in the text's own
    order would leave out whole parts of it (for kjv, half the Bible gives no New Testament, so Matthew,
    held out, would look like another language)."""
    order, smoothing = NGRAMS[name]
    blocks = np.random.default_rng(s.seed).permutation(train_blocks)
    sizes = sorted({max(1, len(blocks) >> k) for k in range(s.points)})
    curve = []
    with progress_bar(len(sizes), desc=LABELS[name], unit="model", disable=not show_progress) as bar:
        for n in sizes:
            model = fit_ngram(training_runs(tokens, np.sort(blocks[:n]), s.block_size), order, vocab_size, smoothing)
            curve.append((n * s.block_size, perplexity(model, scored, model.config.context_length).perplexity))
            bar.update()
    return curve


def _neural_curve(name: str, out: Path, scored: torch.Tensor, vocab_size: int, s: ClassicVsNeuralSettings,
                  show_progress: bool) -> dict | None:
    """Train the neural model `name` in out/runs/name (or continue it) with a checkpoint at each of s.points
    steps, score each checkpoint and save {"curve": [(training tokens read, held-out perplexity)], "seconds":
    this session's training and scoring} as the run's heldout.json; read back when it is there; None when stopped."""
    run, tokenizer = out / "runs" / name, out / TOKENIZER_FILE
    if (run / "heldout.json").is_file():
        return read_json_object(run / "heldout.json", f"delete {run} to train it again")
    start, every = time.perf_counter(), s.max_steps // s.points
    train = TrainConfig(loop=LoopConfig(max_steps=s.max_steps, batch_size=s.batch_size, eval_every=every,
                                        checkpoint_every=every, keep_checkpoints=s.points + 1,
                                        log_every=max(1, s.max_steps // 100), seed=s.seed), block_size=s.block_size,
                        optim=OptimConfig(lr=s.lr, warmup_steps=s.max_steps // 10), eval_batches=8)
    model_cfg, context, stride = _neural_config(name, s)
    resume = bool(list_checkpoints(run / "checkpoints"))
    recipe = pretrain if name == "transformer" else train_neural_lm
    result = recipe(model_cfg, train, s.data, run, tokenizer=tokenizer, resume=resume, show_progress=show_progress)
    model = registry.build(dataclasses.replace(model_cfg, vocab_size=vocab_size))
    if result.interrupted:
        return None
    curve = []
    for checkpoint in list_checkpoints(run / "checkpoints"):
        saved = load_checkpoint(checkpoint)
        load_trainable(model, saved["trainable"])
        curve.append((saved["step"] * s.batch_size * s.block_size,
                      perplexity(model.eval(), scored, context, stride).perplexity))
    scored_run = {"curve": curve, "seconds": time.perf_counter() - start}
    atomic_write_text(run / "heldout.json", json.dumps(scored_run))
    return scored_run


def _neural_config(name: str, s: ClassicVsNeuralSettings):
    """The model's config and the (window, stride) it is scored in."""
    if name == "window":
        cfg = WindowConfig(vocab_size=s.vocab_size, window=5, d_model=64, hidden=256, dropout=s.dropout)
        return cfg, cfg.context_length, cfg.context_length // 2  # >= 2 x window: exact
    if name in ("lstm", "gru"):
        cfg = RNNConfig(cell=name, vocab_size=s.vocab_size, d_model=256, hidden=256, n_layers=2, tie_embeddings=True,
                        dropout=s.dropout)
        return cfg, 4 * s.block_size, 2 * s.block_size
    cfg = preset("gpt2-tiny").replace(n_layers=2, vocab_size=s.vocab_size, context_length=s.block_size,
                                      dropout=s.dropout)
    return cfg, s.block_size, s.block_size // 2


def results_table(report: dict) -> str:
    """A markdown table: each model's last held-out perplexity, the tokens it read and its time."""
    s = report["settings"]
    lines = [f"| model ({s['data']}, BPE {s['vocab_size']}, {report['scored_tokens']:,} held-out tokens) | "
             "held-out perplexity | training tokens read | seconds |", "|---|---:|---:|---:|"]
    for r in report["results"].values():
        lines.append(f"| {r['label']} | {r['ppl']:.2f} | {r['tokens']:,} | {r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"

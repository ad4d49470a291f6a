"""Scaling laws measured on this machine: a grid of decoder sizes and token budgets, and the laws fitted to it.

Each point of the grid (`scaling_grid`) is a normal pre-training run in DIR/runs/NAME with one shared
tokenizer and corpus, scored afterwards on one held-out token stream with every token given at least half a
context of left context (DIR/runs/NAME/heldout.json). Run the same command again after an interruption and
it picks up where it stopped: the plan (DIR/scaling_plan.json) is kept, finished runs are skipped and a
stopped one resumes from its checkpoint.

The fits (`lmlab.eval.scaling_laws`): Kaplan et al.'s joint L(N, D), whose limits are their L(N) and L(D)
power laws; Chinchilla's L(N, D) = E + A/N^alpha + B/D^beta on every run; the compute-optimal
size of each isoFLOP profile (Chinchilla's approach 2) and its growth N_opt ~ C^a, beside the a =
beta / (alpha + beta) that approach 3 implies; bootstrap intervals on the exponents. On `markov` the
irreducible loss is known: the held-out stream's exact surprisal per token, reported beside the fitted E.

Written to DIR: scaling.json (every run and fit), scaling.md (the tables), scaling_compute.png (loss against
compute for each size, with the frontier and the fitted compute-optimal loss) and scaling_isoflop.png.
"""

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.data.blocks import split_blocks
from lmlab.data.corpora import EMBEDDED, MARKOV_HELD_OUT_SEED, MARKOV_TRAIN_DOCS, MARKOV_TRAIN_SEED, load_corpus
from lmlab.data.markov import markov_corpus
from lmlab.data.stdlib import stdlib_texts
from lmlab.data.tokens import tokenize_corpus
from lmlab.errors import LmlabError
from lmlab.eval import scaling_laws as laws
from lmlab.eval.perplexity import perplexity
from lmlab.experiments.scaling_grid import (
    PlannedRun,
    calibrate,
    enough_for_fits,
    ladder_config,
    plan_grid,
)
from lmlab.experiments.settings import ScalingSettings
from lmlab.figures import save_line_plot
from lmlab.io.atomic import atomic_write_text
from lmlab.io.json_file import read_json_object
from lmlab.io.outputs import check_run_dir
from lmlab.models.load import load
from lmlab.models.presets import preset
from lmlab.recipes.pretrain import pretrain
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, save_tokenizer, train_bpe
from lmlab.training.checkpoint import list_checkpoints

RESULTS, PLAN = "scaling", "scaling_plan.json"
HELD_OUT_TOKENS = 32768  # scored tokens of a corpus's validation blocks
HELD_OUT_DOCS = 1200  # fresh markov documents, about 36k tokens at a 1k vocabulary
VAL_FRACTION = TrainConfig.val_fraction
# Published exponents, for the comparison in docs/scale.md (their losses are on other text and tokenizers).
PUBLISHED = {"kaplan_alpha_n": 0.076, "kaplan_alpha_d": 0.095, "chinchilla_alpha": 0.34, "chinchilla_beta": 0.28,
             "chinchilla_e": 1.69, "n_opt_exponent_isoflop": 0.49, "n_opt_exponent_law": 0.46}


def scaling(out: str | Path, settings: ScalingSettings = ScalingSettings(), show_progress: bool = True
            ) -> dict | None:
    """Plan (or continue) the grid in `out`, train and score every run, fit the laws; return scaling.json's
    content, or None when a run was stopped (Ctrl-C; the same call again continues)."""
    out, s = Path(out), settings
    plan = _continue_or_plan(out, s)
    runs = [PlannedRun(**{f.name: row[f.name] for f in dataclasses.fields(PlannedRun)}) for row in plan["runs"]]
    tokenizer = out / TOKENIZER_FILE
    stream, floor = held_out_stream(s, plan["corpus"], load_tokenizer(tokenizer))
    started, spent, estimated = time.perf_counter(), 0.0, 0.0
    for number, run in enumerate(runs, 1):
        run_dir = out / "runs" / run.name
        if (run_dir / "heldout.json").is_file():
            continue
        left = sum(r.estimate_s for r in runs[number - 1:]) * (spent / estimated if estimated else 1.0)
        print(f"scaling: run {number}/{len(runs)} {run.name} (N={run.non_embedding:,}, D={run.tokens:,} tokens), "
              f"about {left / 60:.1f} min of the grid left", file=sys.stderr)
        t0 = time.perf_counter()
        result = pretrain(_model_config(s, run), _train_config(s, run), plan["corpus"], run_dir, tokenizer=tokenizer,
                          resume=bool(list_checkpoints(run_dir / "checkpoints")), show_progress=show_progress)
        if result.interrupted:  # Ctrl-C: the run saved a checkpoint
            print(f"scaling: stopped during {run.name}; run the same command again to continue the grid",
                  file=sys.stderr)
            return None
        model, _ = load(result.model_dir)
        score = perplexity(model, stream, s.block_size)
        atomic_write_text(run_dir / "heldout.json", json.dumps({"loss": score.nll_sum / (score.tokens - 1),
                                                               "tokens": score.tokens}))
        spent, estimated = spent + time.perf_counter() - t0, estimated + run.estimate_s
    report = fit_report(runs, [_heldout(out, run) for run in runs], floor, s.bootstrap)
    report |= {"settings": _settings_dict(s), "corpus_tokens": plan["corpus_tokens"],
               "calibration_s_per_step": plan["step_seconds"], "this_session_s": time.perf_counter() - started}
    atomic_write_text(out / f"{RESULTS}.json", json.dumps(report, indent=2))
    atomic_write_text(out / f"{RESULTS}.md", results_table(report))
    save_plots(out, report)
    return report


# --- the plan, the corpus and the held-out stream ------------------------------------------------------


def _continue_or_plan(out: Path, s: ScalingSettings) -> dict:
    """The saved plan when `out` holds this grid; otherwise time a step of each size, plan the runs, train the
    tokenizer, write the corpus the runs need, and save the plan."""
    if (out / PLAN).is_file():
        plan = read_json_object(out / PLAN, "choose a new --out directory")
        if plan.get("settings") != _settings_dict(s):
            changed = sorted(k for k, v in _settings_dict(s).items() if plan.get("settings", {}).get(k) != v)
            raise LmlabError(f"'{out}' holds a scaling grid planned with other settings ({', '.join(changed)}); "
                             "run it with the same flags to continue, or choose a new --out directory")
        return plan
    check_run_dir(out)
    if out.is_dir() and any(out.iterdir()):
        raise LmlabError(f"'{out}' is not empty and holds no scaling grid; choose a new --out directory")
    started = time.perf_counter()
    base, sizes = preset(s.model), s.sizes
    step_seconds = calibrate(base, sizes, s.vocab_size, s.batch_size, s.block_size)
    budget = s.budget_minutes * 60 - (time.perf_counter() - started)
    runs = plan_grid(base, sizes, step_seconds, budget, s.vocab_size, s.batch_size, s.block_size, s.min_steps,
                     s.tokens_per_parameter)
    texts = stdlib_texts(max_bytes=10**9) if s.data == "stdlib" else load_corpus(s.data)
    tokenizer = train_bpe(texts, s.vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    save_tokenizer(tokenizer, out)
    corpus, corpus_tokens = _write_corpus(out, s, texts, tokenizer, max(r.tokens for r in runs))
    plan = {"settings": _settings_dict(s), "corpus": corpus, "corpus_tokens": corpus_tokens,
            "step_seconds": step_seconds, "runs": [dataclasses.asdict(r) for r in runs]}
    atomic_write_text(out / PLAN, json.dumps(plan, indent=2))
    print(f"scaling: {len(runs)} runs in {len({r.profile for r in runs})} isoFLOP profiles, sizes "
          f"{min(r.non_embedding for r in runs):,} to {max(r.non_embedding for r in runs):,}, estimated "
          f"{sum(r.estimate_s for r in runs) / 60:.1f} min", file=sys.stderr)
    return plan


def _write_corpus(out: Path, s: ScalingSettings, texts: list[str], tokenizer, tokens_needed: int) -> tuple[str, int]:
    """The corpus every run reads, and its size in tokens. `markov` is sampled until the longest run reads
    no document twice (one epoch, as the laws assume); other data is what it is, and may repeat."""
    if s.data == "markov":
        per_doc = len(tokenize_corpus(texts, tokenizer)) / len(texts)
        docs = max(MARKOV_TRAIN_DOCS, math.ceil(tokens_needed / (1 - VAL_FRACTION) / per_doc * 1.02))
        texts = markov_corpus(docs, seed=MARKOV_TRAIN_SEED)[0]
    corpus = s.data
    if s.data in EMBEDDED:
        corpus = str(out / "corpus.jsonl")
        atomic_write_text(corpus, "".join(json.dumps({"text": text}) + "\n" for text in texts))
    return corpus, len(tokenize_corpus(texts, tokenizer))


def held_out_stream(s: ScalingSettings, corpus: str, tokenizer) -> tuple[torch.Tensor, float | None]:
    """The held-out tokens every run is scored on, and (markov only) the floor: their exact surprisal per
    scored token. `markov`: fresh documents from the source; other data: the runs' validation blocks."""
    if s.data == "markov":
        texts, surprisal = markov_corpus(HELD_OUT_DOCS, seed=MARKOV_HELD_OUT_SEED)
        stream = tokenize_corpus(texts, tokenizer)
        return torch.from_numpy(stream.astype(np.int64)), surprisal / (len(stream) - 1)
    tokens = tokenize_corpus(load_corpus(corpus), tokenizer)
    split = split_blocks(tokens, s.block_size, VAL_FRACTION, s.seed)
    blocks = [tokens[start:start + s.block_size] for start in split.val_blocks[:HELD_OUT_TOKENS // s.block_size]]
    return torch.from_numpy(np.concatenate(blocks).astype(np.int64)), None


def _model_config(s: ScalingSettings, run: PlannedRun):
    return ladder_config(preset(s.model), run.size, s.vocab_size, s.block_size)


def _train_config(s: ScalingSettings, run: PlannedRun) -> TrainConfig:
    """A cosine schedule as long as the run; a few evaluations for the curves; one checkpoint at the end."""
    lr = s.lr * min(1.0, 32 / run.d_model)
    return TrainConfig(loop=LoopConfig(max_steps=run.steps, batch_size=s.batch_size, eval_every=max(1, run.steps // 8),
                                       checkpoint_every=run.steps, keep_checkpoints=1,
                                       log_every=max(1, run.steps // 50), seed=s.seed), block_size=s.block_size,
                       optim=OptimConfig(lr=lr, warmup_steps=min(100, run.steps // 10)), val_fraction=VAL_FRACTION,
                       eval_batches=4)


def _settings_dict(s: ScalingSettings) -> dict:
    return dataclasses.asdict(s) | {"tokens_per_parameter": list(s.tokens_per_parameter)}


def _heldout(out: Path, run: PlannedRun) -> float:
    return read_json_object(out / "runs" / run.name / "heldout.json", "run the grid again")["loss"]


# --- the fits ------------------------------------------------------------------------------------------


def fit_report(runs: list[PlannedRun], losses: list[float], floor: float | None, samples: int = 100) -> dict:
    """Every fit of the module docstring on `runs` and their held-out `losses` (nats per token)."""
    if not enough_for_fits(runs):
        raise LmlabError("too few runs for the scaling-law fits (5 runs, two isoFLOP profiles of 3)")
    n = [float(r.non_embedding) for r in runs]
    d = [float(r.tokens) for r in runs]
    chinchilla = laws.fit_chinchilla(n, d, losses)
    kaplan = laws.fit_kaplan(n, d, losses)
    profiles = isoflop_profiles(runs, losses)
    optima = [p for p in profiles if p["n_opt"] is not None]
    n_opt_law = laws.fit_power_law([p["compute"] for p in optima], [p["n_opt"] for p in optima]) \
        if len(optima) >= 2 else None

    def refit(indices: list[int]) -> dict[str, float]:
        points = [n[i] for i in indices], [d[i] for i in indices], [losses[i] for i in indices]
        try:
            fit = laws.fit_chinchilla(*points, grid=_grid_at(chinchilla), starts=1)
            joint = laws.fit_kaplan(*points, start=kaplan)
        except LmlabError:  # a resample with too few runs
            return {}
        return {"alpha": fit.alpha, "beta": fit.beta, "E": fit.E, "a": fit.beta / (fit.alpha + fit.beta),
                "alpha_n": joint.alpha_n, "alpha_d": joint.alpha_d}

    intervals = laws.bootstrap(refit, len(runs), samples) if samples else {}
    return {
        "runs": [dataclasses.asdict(r) | {"compute": r.compute, "loss": loss} for r, loss in zip(runs, losses)],
        "floor": floor,
        "kaplan": dataclasses.asdict(kaplan) | {"rms_log_residual": _rms_log_residual(kaplan, n, d, losses)},
        "chinchilla": dataclasses.asdict(chinchilla) | {"a": chinchilla.beta / (chinchilla.alpha + chinchilla.beta),
                                                        "rms_log_residual": _rms_log_residual(chinchilla, n, d, losses)},
        "intervals": intervals,
        "isoflop": profiles,
        "n_opt_exponent_isoflop": -n_opt_law.exponent if n_opt_law else None,
        "frontier": frontier(runs, losses),
        "published": PUBLISHED,
    }


def isoflop_profiles(runs: list[PlannedRun], losses: list[float]) -> list[dict]:
    """Per isoFLOP profile of at least 3 runs: its compute (the runs' geometric mean) and the vertex of the
    parabola of loss against log N, or None (with why) where the runs do not bracket it."""
    profiles = []
    for k in sorted({r.profile for r in runs}):
        members = [i for i, r in enumerate(runs) if r.profile == k]
        if len(members) < 3:
            continue
        compute = math.exp(sum(math.log(runs[i].compute) for i in members) / len(members))
        try:
            n_opt, why = laws.isoflop_optimum([runs[i].non_embedding for i in members],
                                              [losses[i] for i in members]), None
        except LmlabError as e:
            n_opt, why = None, str(e)
        profiles.append({"profile": k, "compute": compute, "runs": [runs[i].name for i in members], "n_opt": n_opt,
                         "d_opt": compute / (6 * n_opt) if n_opt else None, "unbracketed": why})
    return profiles


def frontier(runs: list[PlannedRun], losses: list[float]) -> list[str]:
    """The runs no cheaper run beats: lower loss than every run of less compute (the compute frontier)."""
    best, names = math.inf, []
    for i in sorted(range(len(runs)), key=lambda i: runs[i].compute):
        if losses[i] < best:
            best = losses[i]
            names.append(runs[i].name)
    return names


def _rms_log_residual(law, n: list[float], d: list[float], losses: list[float]) -> float:
    """How far a fitted law is from the runs: the root mean square of log(predicted) - log(measured)."""
    return math.sqrt(sum((math.log(law(*point)) - math.log(loss)) ** 2 for *point, loss in zip(n, d, losses))
                     / len(losses))


def _grid_at(fit: laws.ChinchillaFit) -> dict:
    """A one-point start grid at `fit`'s parameters, for refitting resamples from the full fit."""
    return {"a": (math.log(fit.A),), "b": (math.log(fit.B),), "e": (math.log(fit.E),), "alpha": (fit.alpha,),
            "beta": (fit.beta,)}


# --- what people read ----------------------------------------------------------------------------------


def results_table(report: dict) -> str:
    """The fitted laws against the published ones (markdown), then every run."""
    c, k, p = report["chinchilla"], report["kaplan"], report["published"]
    ci = report["intervals"]

    def interval(name: str) -> str:
        return f" ({ci[name][0]:.3g} to {ci[name][1]:.3g})" if name in ci else ""

    isoflop = report["n_opt_exponent_isoflop"]
    lines = ["| quantity | fitted here (90% bootstrap interval) | published |", "|---|---:|---:|",
             f"| Kaplan alpha_N, L(N) = (N_c/N)^alpha_N | {k['alpha_n']:.3f}{interval('alpha_n')} | "
             f"{p['kaplan_alpha_n']} |",
             f"| Kaplan alpha_D, L(D) = (D_c/D)^alpha_D | {k['alpha_d']:.3f}{interval('alpha_d')} | "
             f"{p['kaplan_alpha_d']} |",
             f"| Chinchilla alpha (model size) | {c['alpha']:.3f}{interval('alpha')} | {p['chinchilla_alpha']} |",
             f"| Chinchilla beta (tokens) | {c['beta']:.3f}{interval('beta')} | {p['chinchilla_beta']} |",
             f"| Chinchilla E (nats/token) | {c['E']:.3f}{interval('E')} | {p['chinchilla_e']} (other text) |",
             f"| N_opt ~ C^a, a from the law, beta/(alpha+beta) | {c['a']:.3f}{interval('a')} | "
             f"{p['n_opt_exponent_law']} |",
             f"| N_opt ~ C^a, a from the isoFLOP profiles | {'n/a' if isoflop is None else f'{isoflop:.3f}'} | "
             f"{p['n_opt_exponent_isoflop']} |",
             f"| RMS log residual: Kaplan / Chinchilla | {k['rms_log_residual']:.4f} / {c['rms_log_residual']:.4f} | |"]
    if report["floor"] is not None:
        lines.append(f"| true entropy of the held-out text (nats/token) | {report['floor']:.3f} | |")
    lines += ["", "| run | N (non-embedding) | D (tokens) | D/N | C = 6ND | held-out loss |",
              "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['name']} | {r['non_embedding']:,} | {r['tokens']:,} | {r['tokens'] / r['non_embedding']:.1f} | "
              f"{r['compute']:.2e} | {r['loss']:.4f} |" for r in report["runs"]]
    return "\n".join(lines) + "\n"


def save_plots(out: Path, report: dict) -> None:
    """scaling_compute.png: loss against compute for every other size or so, the frontier and the fitted law at
    the best of the sizes trained (and the true entropy on markov); scaling_isoflop.png: loss against N per
    profile."""
    runs = report["runs"]
    by_name = {r["name"]: r for r in runs}
    series = {}
    sizes = sorted({r["size"] for r in runs})
    for size in sizes[::math.ceil(len(sizes) / 7)]:  # at most 7 sizes: with the 3 lines below, 10 distinct colours
        mine = sorted((r for r in runs if r["size"] == size), key=lambda r: r["compute"])
        series[f"N={mine[0]['non_embedding']:,}"] = ([r["compute"] for r in mine], [r["loss"] for r in mine])
    edge = [by_name[name] for name in report["frontier"]]
    series["frontier"] = ([r["compute"] for r in edge], [r["loss"] for r in edge])
    fit = laws.ChinchillaFit(**{k: report["chinchilla"][k] for k in ("E", "A", "B", "alpha", "beta", "objective")})
    computes = np.geomspace(min(r["compute"] for r in runs), max(r["compute"] for r in runs), 32).tolist()
    low, high = report["settings"]["tokens_per_parameter"]  # the law where the grid has runs: sizes trained,
    sizes_run = sorted({r["non_embedding"] for r in runs})  # tokens per parameter in the band
    best = [min((fit(n, c / (6 * n)) for n in sizes_run if low <= c / (6 * n * n) <= high), default=math.nan)
            for c in computes]
    series["law, best size in the grid"] = (computes, best)
    if report["floor"] is not None:
        series["true entropy"] = ([computes[0], computes[-1]], [report["floor"]] * 2)
    save_line_plot(out / f"{RESULTS}_compute.png", series, title="Loss against compute",
                   xlabel="compute C = 6ND (FLOPs)", ylabel="loss (nats/token)", log_x=True, size=(900, 600))
    profiles, every = {}, math.ceil(len(report["isoflop"]) / 10)  # at most 10: one colour each
    for profile in report["isoflop"][::-1][::every][::-1]:  # the largest compute always shown
        members = sorted((by_name[name] for name in profile["runs"]), key=lambda r: r["non_embedding"])
        profiles[f"C={profile['compute']:.1e}"] = ([r["non_embedding"] for r in members], [r["loss"] for r in members])
    save_line_plot(out / f"{RESULTS}_isoflop.png", profiles, title="IsoFLOP profiles",
                   xlabel="non-embedding parameters N", ylabel="loss (nats/token)", log_x=True, size=(900, 600))

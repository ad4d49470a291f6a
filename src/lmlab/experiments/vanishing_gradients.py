"""The vanishing-gradient experiment: an Elman RNN, an LSTM and a GRU of the same size, measured at
initialisation and after a short training on the same text, the same tokens, the same seed.

For each model and stage: || dL_t / dx_{t-k} || for k = 0..K (lmlab.eval.vanishing_gradients),
averaged over batches of held-out sequences, and its decay per step back. Written to DIR as
vanishing_gradients.json, a markdown table (.md, also printed) and a log-scale PNG plot.
"""

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.data.blocks import gather, split_blocks
from lmlab.data.corpora import load_corpus
from lmlab.data.tokens import tokenize_corpus
from lmlab.errors import LmlabError
from lmlab.eval.vanishing_gradients import decay_per_step, gradient_norms_by_distance
from lmlab.experiments.settings import VanishingGradientSettings
from lmlab.figures import save_line_plot
from lmlab.io.atomic import atomic_write_text
from lmlab.io.outputs import check_run_dir
from lmlab.models.neural_lm_files import load_rnn_dir
from lmlab.models.rnn import RNNLM, RNNConfig
from lmlab.recipes.neural_lm import train_neural_lm
from lmlab.tokenizers.bpe import TOKENIZER_FILE, save_tokenizer, train_bpe

TABLE_DISTANCES = (0, 1, 2, 5, 10, 20, 50, 100)  # the k shown in the table (those <= K), plus K itself


def vanishing_gradients(out: str | Path, data: str = "markov", settings: VanishingGradientSettings =
                        VanishingGradientSettings(), show_progress: bool = True) -> dict:
    """Run the experiment on `data` (a path or an embedded corpus name) into the directory `out`; return
    the results written to out/vanishing_gradients.json."""
    s, out = settings, Path(out)
    if s.steps_back < 2:
        raise LmlabError(f"--steps-back {s.steps_back} must be at least 2 (a decay needs two distances)")
    if s.train_steps < 0:
        raise LmlabError(f"--train-steps {s.train_steps} must be at least 0")
    if (out / "vanishing_gradients.json").exists() or (out / "runs").exists():
        raise LmlabError(f"'{out}' already holds an experiment; choose a new --out directory")
    check_run_dir(out)

    texts = load_corpus(data)
    tokenizer = train_bpe(texts, s.vocab_size)
    tokens = tokenize_corpus(texts, tokenizer)
    split = split_blocks(tokens, s.steps_back + 1, 0.1, s.seed)  # measured on held-out sequences of K + 2 tokens
    rows = np.random.default_rng(s.seed).choice(split.val_blocks, s.batches * s.batch_size)
    batches = [gather(tokens, rows[i:i + s.batch_size], s.steps_back + 1) for i in range(0, len(rows), s.batch_size)]
    save_tokenizer(tokenizer, out)

    norms = {}
    for cell in s.cells:
        config = RNNConfig(cell, vocab_size=tokenizer.get_vocab_size(), d_model=s.d_model, hidden=s.hidden,
                           n_layers=1)
        torch.manual_seed(s.seed)  # the initial weights of the training run below
        norms[f"{cell} init"] = _mean_norms(RNNLM(config), batches)
        if s.train_steps:
            train = TrainConfig(loop=LoopConfig(max_steps=s.train_steps, batch_size=s.batch_size,
                                                eval_every=s.train_steps, checkpoint_every=s.train_steps,
                                                keep_checkpoints=1, seed=s.seed), block_size=s.block_size,
                                optim=OptimConfig(lr=s.lr, warmup_steps=min(20, s.train_steps)))
            result = train_neural_lm(config, train, data, out / "runs" / cell, tokenizer=out / TOKENIZER_FILE,
                                     show_progress=show_progress)
            norms[f"{cell} trained"] = _mean_norms(load_rnn_dir(result.model_dir), batches)

    results = {"settings": dataclasses.asdict(s) | {"cells": list(s.cells), "data": data},
               "steps_back": list(range(s.steps_back + 1)),
               "grad_norm": {name: values.tolist() for name, values in norms.items()},
               "decay_per_step": {name: decay_per_step(values) for name, values in norms.items()}}
    atomic_write_text(out / "vanishing_gradients.json", json.dumps(results, indent=2))
    atomic_write_text(out / "vanishing_gradients.md", results_table(results))
    save_line_plot(out / "vanishing_gradients.png",
                   {name: (results["steps_back"], values) for name, values in results["grad_norm"].items()},
                   title="Gradient norm vs distance", xlabel="k (steps back)",
                   ylabel="mean grad norm (log scale)", log_y=True)
    return results


def _mean_norms(model: RNNLM, batches: list[torch.Tensor]) -> np.ndarray:
    return np.mean([gradient_norms_by_distance(model, ids) for ids in batches], axis=0)  # (K + 1,)


def results_table(results: dict) -> str:
    """A markdown table: one row per model and stage, the gradient norm at some distances k, the decay per step."""
    K = results["steps_back"][-1]
    ks = [k for k in TABLE_DISTANCES if k < K] + [K]
    lines = ["| model | " + " | ".join(f"k={k}" for k in ks) + " | decay per step |",
             "|---|" + "---:|" * (len(ks) + 1)]
    for name, values in results["grad_norm"].items():
        cells = " | ".join(f"{values[k]:.2e}" for k in ks)
        lines.append(f"| {name} | {cells} | {results['decay_per_step'][name]:.3f} |")
    return "\n".join(lines) + "\n"

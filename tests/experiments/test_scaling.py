"""`lmlab experiment scaling`: the grid it plans within a budget, a grid continued after a stop, refusals in
one line, and, on the markov corpus, a fitted irreducible loss E close to the source's true entropy.

The timed training step that sizes a grid is replaced here by fixed times (measured once on a 2-core VM), so
every machine plans the same runs."""

import json

import pytest

from conftest import lmlab, one_line_error
from lmlab.config import PRESETS
from lmlab.errors import LmlabError
from lmlab.experiments import scaling as experiment
from lmlab.experiments.scaling import ScalingSettings, scaling
from lmlab.experiments.scaling_grid import (
    LADDER,
    RUN_OVERHEAD_S,
    enough_for_fits,
    ladder_config,
    non_embedding_parameters,
    plan_grid,
)
from png_files import read_png

pytestmark = pytest.mark.usefixtures("one_thread")

STEP_S = {0: 0.0026, 1: 0.0029, 2: 0.0026, 3: 0.0031, 4: 0.0033, 5: 0.0045, 6: 0.0060}  # seconds per step
TINY = ScalingSettings(budget_minutes=0.75, min_steps=8, batch_size=8, block_size=32, max_parameters=4000,
                       bootstrap=5)  # 12 runs of 8 to 256 steps
TINY_FLAGS = ["--budget-minutes", "0.75", "--min-steps", "8", "--batch-size", "8", "--block-size", "32",
              "--max-parameters", "4000", "--bootstrap", "5"]


@pytest.fixture
def fixed_steps(monkeypatch):
    monkeypatch.setattr(experiment, "calibrate", lambda base, sizes, *rest: [STEP_S[size] for size in sizes])


def test_the_ladder_doubles_its_non_embedding_parameters():
    counts = [non_embedding_parameters(ladder_config(PRESETS["gpt2-tiny"], i, 1024, 64)) for i in range(len(LADDER))]
    assert counts[0] < 1e3 and 3e6 < counts[-1] < 1e7
    assert all(1.6 < big / small < 2.6 for small, big in zip(counts, counts[1:]))
    llama = [non_embedding_parameters(ladder_config(PRESETS["llama-tiny"], i, 1024, 64)) for i in range(len(LADDER))]
    assert all(0.9 < a / b < 1.1 for a, b in zip(llama, counts))


def test_the_plan_keeps_the_ratio_band_and_adds_whole_isoflop_profiles_within_the_budget():
    sizes, seconds = [1, 2, 3, 4, 5], [STEP_S[i] for i in (1, 2, 3, 4, 5)]
    args = (PRESETS["gpt2-tiny"], sizes, seconds)
    shape = dict(vocab_size=1024, batch_size=8, block_size=64, min_steps=400, ratio=(2.0, 512.0))
    runs = plan_grid(*args, 120.0, **shape)
    assert enough_for_fits(runs) and len({r.name for r in runs}) == len(runs)
    assert sum(r.estimate_s for r in runs) <= 120
    for run in runs:
        j = int(run.name.split("-d")[1])
        assert run.steps == 400 * 2**j and run.tokens == run.steps * 8 * 64
        assert run.profile == sizes.index(run.size) + j and 2 <= run.tokens / run.non_embedding <= 512
        assert run.estimate_s == pytest.approx(run.steps * STEP_S[run.size] + RUN_OVERHEAD_S)
    bigger = plan_grid(*args, 600.0, **shape)
    assert bigger[:len(runs)] == runs and {r.profile for r in bigger} > {r.profile for r in runs}
    with pytest.raises(LmlabError, match=r"raise --budget-minutes to at least (\d+)") as refused:
        plan_grid(*args, 5.0, **shape)
    minutes = int(refused.value.args[0].rsplit(" ", 1)[1])
    assert enough_for_fits(plan_grid(*args, minutes * 60.0, **shape))


def test_a_stopped_grid_continues_where_it_stopped(tmp_path, fixed_steps, monkeypatch, capsys):
    out, real_pretrain, calls, sessions = tmp_path / "grid", experiment.pretrain, [], []

    def stopping_pretrain(*args, **kwargs):  # the first session's third run stops after one step, as Ctrl-C would
        calls.append((args[3].name, kwargs["resume"]))
        stop = len(calls) == 3 and not sessions
        return real_pretrain(*args, **kwargs, stop_after=1 if stop else None)

    monkeypatch.setattr(experiment, "pretrain", stopping_pretrain)
    assert scaling(out, TINY, show_progress=False) is None
    assert "run the same command again" in capsys.readouterr().err
    plan = json.loads((out / "scaling_plan.json").read_text())
    names = [run["name"] for run in plan["runs"]]
    assert calls == [(name, False) for name in names[:3]]
    assert not (out / "runs" / names[2] / "heldout.json").exists()

    calls.clear()
    sessions.append("second")
    assert lmlab("experiment", "scaling", "--out", out, *TINY_FLAGS) == 0
    assert calls == [(names[2], True)] + [(name, False) for name in names[3:]]
    report = json.loads((out / "scaling.json").read_text())
    assert [run["name"] for run in report["runs"]] == names and all(run["loss"] > 0 for run in report["runs"])
    assert set(report["intervals"]) == {"alpha", "beta", "E", "a", "alpha_n", "alpha_d"}
    printed = capsys.readouterr().out
    assert "| Chinchilla E (nats/token) |" in printed and (out / "scaling.md").read_text() in printed
    for png in ("scaling_compute.png", "scaling_isoflop.png"):
        assert read_png(out / png).shape == (600, 900, 3)
    run = json.loads((out / "runs" / names[0] / "run.json").read_text())  # each point is a normal run directory
    assert run["recipe"] == "pretrain" and run["model"]["n_layers"] == LADDER[plan["runs"][0]["size"]][0]

    calls.clear()
    assert lmlab("experiment", "scaling", "--out", out, *TINY_FLAGS) == 0 and calls == []  # all done: refit only
    assert lmlab("experiment", "scaling", "--out", out, *TINY_FLAGS, "--lr", "0.003") == 2
    one_line_error(capsys, "planned with other settings (lr)", "same flags")


def test_bad_outputs_and_budgets_are_one_line_errors(tmp_path, fixed_steps, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert lmlab("experiment", "scaling", "--out", tmp_path, *TINY_FLAGS) == 2
    one_line_error(capsys, "holds files", "choose a new or empty --out directory")
    assert (tmp_path / "notes.txt").read_text() == "mine" and len(list(tmp_path.iterdir())) == 1
    assert lmlab("experiment", "scaling", "--out", tmp_path / "new", *TINY_FLAGS[2:], "--budget-minutes", "0.01") == 2
    one_line_error(capsys, "raise --budget-minutes to at least")
    assert not (tmp_path / "new").exists()
    assert lmlab("experiment", "scaling", "--out", tmp_path / "new", "--tokens-per-parameter", "50", "5") == 2
    one_line_error(capsys, "--tokens-per-parameter 50 5")
    assert lmlab("experiment", "scaling", "--out", tmp_path / "new", "--model", "bert-tiny") == 2
    one_line_error(capsys, "not a decoder preset")
    assert lmlab("experiment", "scaling", "--out", tmp_path / "new", "--min-parameters", "1e5", "--max-parameters",
                 "1e4") == 2
    one_line_error(capsys, "--min-parameters 100000 and --max-parameters 10000")


@pytest.mark.slow  # 16 runs: about 3 minutes on a 2-core VM, a fifth of the default test run
def test_on_markov_the_fitted_irreducible_loss_is_the_true_entropy(tmp_path, fixed_steps):
    """16 runs of 1.9k to 25k non-embedding parameters on 0.2M to 1.6M tokens (~2 minutes): Chinchilla's E
    lands within 0.1 nats of the held-out text's exact surprisal per token (1.71), and the fit's
    compute-optimal exponent is positive."""
    settings = ScalingSettings(budget_minutes=2, min_parameters=1500, max_parameters=3e4, bootstrap=0)
    report = scaling(tmp_path, settings, show_progress=False)
    assert len(report["runs"]) == 16
    assert report["floor"] == pytest.approx(1.71, abs=0.02)
    assert report["chinchilla"]["E"] == pytest.approx(report["floor"], abs=0.1)
    assert 0 < report["chinchilla"]["a"] < 1
    assert min(run["loss"] for run in report["runs"]) > report["floor"] - 0.01  # no run beats the entropy
    assert sum(profile["n_opt"] is not None for profile in report["isoflop"]) >= 2

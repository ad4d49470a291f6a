"""`lmlab dpo --loss`: each successor of DPO trains on the one loop and improves its own objective; SimPO
and ORPO build and keep no reference; bad settings are one line."""

import json
import math

import pytest

from chat_models import TINY_FLAGS, TINY_RUN, tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.config import LoopConfig
from lmlab.recipes import dpo as dpo_recipe
from lmlab.recipes.dpo import DPOConfig, dpo
from lmlab.training import preference
from lmlab.training.checkpoint import list_checkpoints, load_checkpoint
from lmlab.training.post_training import PostTrainConfig
from real_models import real_model

pytestmark = pytest.mark.usefixtures("one_thread")

RUN = TINY_RUN.replace(loop=TINY_RUN.loop.replace(max_steps=6, eval_every=6, checkpoint_every=6))
SMOLLM2_RUN = PostTrainConfig(loop=LoopConfig(max_steps=8, batch_size=4, eval_every=8, checkpoint_every=8,
                                             keep_checkpoints=2, log_every=1), block_size=64,
                              optim=PostTrainConfig.optim.replace(lr=1e-3), task_size=100, task_eval_size=4)
SETTINGS = {"ipo": DPOConfig(loss="ipo", beta=0.5), "cdpo": DPOConfig(loss="cdpo", beta=0.5, label_smoothing=0.1),
            "robust": DPOConfig(loss="robust", beta=0.5, label_smoothing=0.1),
            "orpo": DPOConfig(loss="orpo", beta=0.5), "simpo": DPOConfig(loss="simpo", beta=2.0)}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("base") / "tiny")


def test_cli_dpo_loss_simpo_lowers_its_loss_and_orders_the_pairs(base, tmp_path, capsys):
    assert lmlab("dpo", "--model", base, "--data", "task", "--out", tmp_path / "r", *TINY_FLAGS, "--max-steps", "8",
                 "--loss", "simpo", "--beta", "2", "--simpo-gamma", "0.5", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    before, after = result["before"], result["after"]
    assert after["val_loss"] < before["val_loss"] - 0.1 and after["val_margin"] > before["val_margin"]
    assert json.loads((tmp_path / "r" / "run.json").read_text())["loss"] == "simpo"


@pytest.mark.parametrize("loss", ["ipo", "cdpo", "robust", "orpo"])
def test_each_loss_improves_its_own_objective(base, tmp_path, loss):
    result = dpo(base, "task", tmp_path / "r", RUN, SETTINGS[loss], show_progress=False)
    assert result.after["val_loss"] < result.before["val_loss"] and result.after["val_margin"] > 0.1
    if loss in ("cdpo", "robust"):  # at the start the policy is the reference: the margin is 0
        assert result.before["val_loss"] == pytest.approx(math.log(2), abs=1e-4)


@pytest.mark.parametrize("loss,method", [("simpo", "none"), ("orpo", "lora")])
def test_reference_free_losses_build_and_compute_no_reference(base, tmp_path, monkeypatch, loss, method):
    def no_reference(*args, **kwargs):
        raise AssertionError("a reference-free loss asked for a reference")
    monkeypatch.setattr(dpo_recipe, "pair_reference", no_reference)
    monkeypatch.setattr(preference, "adapters_off", no_reference)
    monkeypatch.setattr(preference, "frozen_reference", no_reference)
    cfg = RUN.replace(peft=method, optim=RUN.optim.replace(lr=3e-3 if method == "none" else 1e-2))
    result = dpo(base, "task", tmp_path / "r", cfg, DPOConfig(loss=loss, beta=2.0), show_progress=False)
    assert result.after["val_loss"] < result.before["val_loss"]
    state = load_checkpoint(list_checkpoints(tmp_path / "r" / "checkpoints")[-1])["state"]
    assert "reference" not in state


def test_cli_unknown_loss_and_misplaced_smoothing_are_one_line_exit_2(base, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's choices
        lmlab("dpo", "--model", base, "--data", "task", "--out", tmp_path / "r", "--loss", "kto")
    assert exited.value.code == 2
    one_line_error(capsys, "--loss", "'dpo', 'ipo', 'cdpo', 'robust', 'simpo', 'orpo'")
    assert lmlab("dpo", "--model", base, "--data", "task", "--out", tmp_path / "r", "--label-smoothing", "0.1") == 2
    one_line_error(capsys, "--label-smoothing applies to --loss cdpo, robust, simpo")
    assert lmlab("dpo", "--model", base, "--data", "task", "--out", tmp_path / "r", "--loss", "robust",
                 "--label-smoothing", "0.5") == 2
    one_line_error(capsys, "--label-smoothing 0.5 must be in [0, 0.5)")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
@pytest.mark.parametrize("loss", SETTINGS)
def test_each_loss_lowers_its_held_out_loss_on_smollm2(tmp_path, loss):
    """End to end on the real SmolLM2-135M-Instruct: eight LoRA steps on the task's pairs."""
    result = dpo(real_model("smollm2-135m-instruct"), "task", tmp_path / "r", SMOLLM2_RUN, SETTINGS[loss],
                 show_progress=False)
    assert result.after["val_loss"] < result.before["val_loss"]
    assert result.after["val_margin"] > result.before["val_margin"]

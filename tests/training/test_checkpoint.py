"""Checkpoints hold tensors and plain data only: a planted or foreign file is refused unread."""

import os
import random

import numpy as np
import pytest
import torch

from conftest import TINY_MODEL_ARGS, lmlab, one_line_error
from lmlab.errors import LmlabError
from lmlab.training.checkpoint import FORMAT, list_checkpoints, load_checkpoint, save_checkpoint, set_rng_state


class Planted:
    """What a hostile checkpoint holds: unpickling it calls os.mkdir(path)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


def plant(run, content) -> None:
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    torch.save(content, run / "checkpoints" / "step_0000009.pt")


def draws() -> tuple:
    return random.random(), np.random.rand(), torch.rand(1).item()


def test_a_checkpoint_loads_with_weights_only_and_restores_every_rng(tmp_path):
    path = save_checkpoint(tmp_path, 3, {"model": {"w": torch.ones(2)}, "train_config": {"betas": (0.9, 0.95)}}, 2)
    expected = draws()
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["format"] == FORMAT and ckpt["step"] == 3 and ckpt["train_config"] == {"betas": (0.9, 0.95)}
    set_rng_state(ckpt["rng"])
    assert draws() == expected


def test_saving_anything_but_tensors_and_plain_data_is_a_bug(tmp_path):
    with pytest.raises(TypeError, match=r"checkpoint\['rng_numpy'\] is a ndarray"):
        save_checkpoint(tmp_path, 1, {"rng_numpy": np.zeros(3)}, 1)
    assert list_checkpoints(tmp_path) == []


@pytest.mark.parametrize("command", [["quickstart", "--fast"],
                                     ["train", "--model", "gpt2-tiny", *TINY_MODEL_ARGS, "--resume", "--data"]],
                         ids=["quickstart", "train-resume"])
def test_a_planted_pickle_never_runs(command, tmp_path, corpus_file, capsys):
    """The probe's case: a .pt file in checkpoints/ ran its code on `lmlab quickstart`, which resumes by itself."""
    run, ran = tmp_path / "run", tmp_path / "code-ran"
    plant(run, {"model": Planted(ran)})
    args = [*command, corpus_file] if command[-1] == "--data" else command
    assert lmlab(*args, "--out", run) == 2
    one_line_error(capsys, "step_0000009.pt", "not loaded", "could run code", "new --out")
    assert not ran.exists()


def test_an_older_lmlab_checkpoint_is_refused_with_what_to_do(tmp_path):
    plant(tmp_path, {"model": {}, "step": 9, "rng": {"numpy": np.random.get_state()}})  # format 1
    with pytest.raises(LmlabError, match="before checkpoint format 2.*start the run again in a new --out"):
        load_checkpoint(tmp_path / "checkpoints" / "step_0000009.pt")


def test_a_foreign_checkpoint_is_refused(tmp_path):
    plant(tmp_path, {"model": {"w": torch.ones(1)}, "step": 9})
    with pytest.raises(LmlabError, match=f"not an lmlab checkpoint \\(no format '{FORMAT}'"):
        load_checkpoint(tmp_path / "checkpoints" / "step_0000009.pt")


def test_another_kind_of_runs_checkpoint_is_refused(tmp_path, corpus_file, capsys):
    save_checkpoint(tmp_path / "checkpoints", 1, {"trainable": {}, "settings": {"recipe": "sft"}}, 1)  # sft's
    assert lmlab("train", "--model", "gpt2-tiny", *TINY_MODEL_ARGS, "--data", corpus_file, "--out", tmp_path,
                 "--resume") == 2
    one_line_error(capsys, "holds a sft run, not a pretrain run", "resume it with the command that started it")

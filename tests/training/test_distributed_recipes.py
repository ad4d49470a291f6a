"""Every fine-tuning recipe under torchrun: two CPU processes (gloo) log the losses of one process
that takes the same global batch in two micro-batches (--grad-accum 2), which cuts the batch into
the same two parts, and save the same model."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from chat_models import TINY_FLAGS, tiny_chat_model
from conftest import lmlab
from encoder_data import task_rows, tiny_encoder_dir, write_jsonl

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]  # ~20 s each: 3 processes start torch


def two_processes(*args) -> None:
    """`lmlab *args` in two processes started by torchrun on the CPU."""
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "lmlab.cli.main", *map(str, args)],
                         capture_output=True, text=True, timeout=300, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]


def losses(out) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "loss" in row]


def assert_same_run(one, two, *weight_files: str) -> None:
    """The same per-step losses (all of them: none is missing) and the same saved weights, up to the
    order in which the two processes' gradients are summed. Dropout would differ: two processes draw
    the same masks for their parts where one process draws new ones for its second micro-batch, so
    the tiny models here have none."""
    assert len(losses(one)) > 1 and losses(two) == pytest.approx(losses(one), rel=1e-5)
    for weights in weight_files:
        ones, twos = load_file(one / weights), load_file(two / weights)
        assert ones.keys() == twos.keys()
        for name in ones:
            torch.testing.assert_close(twos[name], ones[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("base") / "tiny")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return tiny_encoder_dir(tmp_path_factory.mktemp("enc") / "tiny")  # without dropout, as bert-tiny


@pytest.mark.parametrize("recipe", ["sft", "dpo", "kto"])
def test_two_processes_fine_tune_a_chat_model_as_one_with_two_micro_batches(chat_model, tmp_path, recipe):
    common = [recipe, "--model", chat_model, "--data", "task", *TINY_FLAGS, "--log-every", "1", "--device", "cpu"]
    assert lmlab(*common, "--grad-accum", "2", "--out", tmp_path / "one") == 0
    two_processes(*common, "--out", tmp_path / "two")
    assert_same_run(tmp_path / "one", tmp_path / "two", "adapter/adapter_model.safetensors", "model/model.safetensors")


def test_two_processes_fine_tune_an_encoder_as_one_with_two_micro_batches(encoder, tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", task_rows("classify")[:11])  # batches of 4, 4 and 3 each epoch
    common = ["finetune", "--model", encoder, "--task", "classify", "--data", data, "--eval", data, "--epochs", "2",
              "--batch-size", "4", "--lr", "3e-3", "--dropout", "0", "--max-length", "32", "--log-every", "1",
              "--device", "cpu"]
    assert lmlab(*common, "--grad-accum", "2", "--out", tmp_path / "one") == 0
    two_processes(*common, "--out", tmp_path / "two")
    assert_same_run(tmp_path / "one", tmp_path / "two", "model/model.safetensors", "model/head.safetensors")
    assert len(losses(tmp_path / "one")) == 2 * 3  # the short batch is filled up to two equal parts, not dropped

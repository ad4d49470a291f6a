"""Pre-training on the GPU (`recipes.pretrain`, the loop every recipe steps through): the losses of a few
steps follow the CPU run's and fall, a run stopped and resumed ends with the weights of the run that went
straight through (dropout on: the checkpoint must restore the CUDA generator too), bf16 autocast trains
close to fp32, and `lmlab train --device` runs. Skipped without CUDA; LMLAB_GPU_TESTS_DEVICE=cpu runs it
on the CPU (tests/gpu_device.py)."""

import math

import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY_MODEL, TINY_MODEL_ARGS, lmlab
from gpu_device import DEVICE, losses, on_device
from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.models.presets import preset
from lmlab.recipes.pretrain import pretrain

pytestmark = [on_device, pytest.mark.usefixtures("one_thread")]

TRAIN = TrainConfig(loop=LoopConfig(max_steps=8, batch_size=8, eval_every=4, checkpoint_every=2, keep_checkpoints=2,
                                    log_every=1), block_size=16, optim=OptimConfig(lr=3e-3, warmup_steps=2))
FAMILIES = {"gpt2": ("gpt2-tiny", {}), "llama": ("llama-tiny", {"n_kv_heads": 1})}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_losses_follow_the_cpu_run_and_fall(tmp_path, corpus_file, family):
    name, overrides = FAMILIES[family]
    cfg = preset(name, **TINY_MODEL, **overrides)
    for run, device in (("cpu", "cpu"), ("device", DEVICE)):
        pretrain(cfg, TRAIN, str(corpus_file), tmp_path / run, device=str(device), show_progress=False)
    cpu, device = losses(tmp_path / "cpu"), losses(tmp_path / "device")
    assert list(device) == list(range(1, 9)) and all(map(math.isfinite, device.values()))
    assert device == pytest.approx(cpu, rel=1e-4)
    assert device[8] < device[1] - 0.1


def test_a_stopped_and_resumed_run_ends_with_the_weights_of_a_straight_one(tmp_path, corpus_file, record_property):
    """Within fp32 rounding: a GPU kernel may add in another order from one call to the next. A generator
    that was not restored draws other dropout masks, which moves the weights by about the learning rate."""
    cfg = preset("gpt2-tiny", **TINY_MODEL, dropout=0.1)
    pretrain(cfg, TRAIN, str(corpus_file), tmp_path / "straight", device=str(DEVICE), show_progress=False)
    first = pretrain(cfg, TRAIN, str(corpus_file), tmp_path / "split", stop_after=3, device=str(DEVICE),
                     show_progress=False)
    assert first.interrupted and first.step == 3
    torch.manual_seed(123)  # what the process draws between the sessions must not matter
    if DEVICE.type == "cuda":
        torch.cuda.manual_seed_all(123)
    second = pretrain(cfg, TRAIN, str(corpus_file), tmp_path / "split", resume=True, device=str(DEVICE),
                      show_progress=False)
    assert second.step == 8 and not second.interrupted
    straight, split = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("straight", "split"))
    assert straight.keys() == split.keys()
    record_property("bit_identical", all(torch.equal(straight[k], split[k]) for k in straight))
    for key in straight:
        torch.testing.assert_close(split[key], straight[key], rtol=0, atol=1e-5)
    assert losses(tmp_path / "split") == pytest.approx(losses(tmp_path / "straight"), rel=1e-5)


def test_bf16_autocast_trains_close_to_fp32(tmp_path, corpus_file):
    cfg = preset("llama-tiny", **TINY_MODEL, n_kv_heads=1)
    pretrain(cfg, TRAIN, str(corpus_file), tmp_path / "fp32", device=str(DEVICE), show_progress=False)
    bf16 = TRAIN.replace(loop=TRAIN.loop.replace(bf16=True))
    result = pretrain(cfg, bf16, str(corpus_file), tmp_path / "bf16", device=str(DEVICE), show_progress=False)
    fp32, half = losses(tmp_path / "fp32"), losses(tmp_path / "bf16")
    assert all(map(math.isfinite, half.values())) and half[8] < half[1] - 0.1
    assert half == pytest.approx(fp32, rel=2e-2)
    assert result.val_loss == pytest.approx(losses(tmp_path / "fp32", "val_loss")[8], rel=2e-2)


def test_lmlab_train_runs_on_the_device(tmp_path, corpus_file):
    assert lmlab("train", "--model", "gpt2-tiny", *TINY_MODEL_ARGS, "--data", corpus_file, "--out", tmp_path / "r",
                 "--max-steps", "3", "--batch-size", "4", "--block-size", "16", "--log-every", "1", "--device", DEVICE,
                 "--bf16") == 0
    assert list(losses(tmp_path / "r")) == [1, 2, 3]
    assert (tmp_path / "r" / "model" / "model.safetensors").is_file()

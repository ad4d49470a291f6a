"""Post-training on the GPU: SFT (LoRA) and DPO (LoRA, and every weight with the reference log-probs computed
once) take the CPU run's steps, their held-out and training losses matching the CPU's to fp32 rounding.
Skipped without CUDA; LMLAB_GPU_TESTS_DEVICE=cpu runs it on the CPU (tests/gpu_device.py)."""

import math

import pytest

from chat_models import TINY_RUN, tiny_chat_model
from gpu_device import DEVICE, losses, on_device
from lmlab.recipes.dpo import dpo
from lmlab.recipes.sft import sft

pytestmark = [on_device, pytest.mark.usefixtures("one_thread")]

# Two steps: DPO's first loss is log 2 whatever the device (the policy is the reference), its second is not.
RUN = TINY_RUN.replace(loop=TINY_RUN.loop.replace(max_steps=2, eval_every=2, checkpoint_every=2), task_eval_size=2)
LR = {"lora": 1e-2, "none": 3e-3}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("base") / "tiny")


def on_both(recipe, base, tmp_path, *args) -> tuple[dict, dict]:
    """Run `recipe` on the CPU and on the device; each run's losses and margins, {(key, step): value}."""
    for run, device in (("cpu", "cpu"), ("device", DEVICE)):
        recipe(base, "task", tmp_path / run, *args, device=str(device), show_progress=False)
    keys = ("loss", "val_loss", "margin", "val_margin")
    return tuple({(key, step): value for key in keys for step, value in losses(tmp_path / run, key).items()}
                 for run in ("cpu", "device"))


def test_an_sft_step_matches_the_cpu(base, tmp_path):
    cpu, device = on_both(sft, base, tmp_path, RUN)
    assert sorted(device) == [("loss", 1), ("loss", 2), ("val_loss", 0), ("val_loss", 2)]
    assert all(map(math.isfinite, device.values()))
    assert device == pytest.approx(cpu, rel=1e-4)
    assert device["loss", 2] != device["loss", 1]  # the first step moved the adapter


@pytest.mark.parametrize("method", ["lora", "none"])
def test_a_dpo_step_matches_the_cpu(base, tmp_path, method):
    cfg = RUN.replace(peft=method, optim=RUN.optim.replace(lr=LR[method]))
    cpu, device = on_both(dpo, base, tmp_path, cfg)
    assert device["loss", 1] == pytest.approx(math.log(2), abs=1e-5)
    assert all(map(math.isfinite, device.values()))
    assert {("loss", 2), ("val_loss", 2), ("margin", 2)} <= device.keys()
    assert device == pytest.approx(cpu, rel=1e-4, abs=1e-5)
    assert device["loss", 2] < math.log(2)

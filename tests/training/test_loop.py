"""The one training loop (lmlab.training.loop), on a linear model small enough to check by hand."""

import argparse
import json

import pytest
import torch
from torch import nn

from lmlab.cli.common.config_flags import add_config_flags, config_overrides
from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.training import distributed
from lmlab.training.checkpoint import list_checkpoints, resume_checkpoint
from lmlab.training.loop import check_same_run, part_of, run_steps, start_session
from lmlab.training.post_training import PostTrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")

OPTIM = OptimConfig(lr=0.1, warmup_steps=0, weight_decay=0.0)
X = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))  # the global batch of every step
Y = X @ torch.tensor([1.0, -2.0, 0.5])


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(3, 1)


def regression_loss(net: nn.Module):
    def step_loss(step: int, part: int, parts: int):
        x, y = part_of(X, part, parts), part_of(Y, part, parts)
        noise = torch.randn(len(x)) * 0.01  # drawn from the RNG the checkpoint restores
        return ((net(x).squeeze(-1) - y - noise) ** 2).mean(), {"rows": float(len(x))}
    return step_loss


def settings(**changes) -> dict:
    return {"recipe": "test", "train": {"max_steps": 4, "seed": 0} | changes}


def test_accumulated_parts_take_the_step_of_the_whole_batch():
    """Two micro-batches of 4 give the gradient of one batch of 8 (a mean over equal parts)."""
    nets = []
    for accum in (1, 2):
        net = model()
        session = start_session(None, net, OPTIM, LoopConfig(max_steps=1, batch_size=8, grad_accum=accum), {})
        torch.manual_seed(1)
        assert run_steps(session, lambda step, part, parts, net=net: (
            ((net(part_of(X, part, parts)).squeeze(-1) - part_of(Y, part, parts)) ** 2).mean(), {}),
            show_progress=False)
        nets.append(net)
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_a_session_without_a_directory_trains_in_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    net = model()
    before = net.weight.detach().clone()
    session = start_session(None, net, OPTIM, LoopConfig(max_steps=5, batch_size=8), {})
    assert run_steps(session, regression_loss(net), show_progress=False)
    assert session.step == 5 and session.metrics is None and not list(tmp_path.iterdir())
    assert not torch.equal(before, net.weight)


def test_a_stopped_session_resumes_to_exactly_the_uninterrupted_run(tmp_path):
    loop = LoopConfig(max_steps=4, batch_size=8, checkpoint_every=1, log_every=1)
    straight = model()  # seeds the RNG the noise is drawn from
    run_steps(start_session(tmp_path / "a", straight, OPTIM, loop, settings()), regression_loss(straight),
              show_progress=False)

    first = model()
    assert not run_steps(start_session(tmp_path / "b", first, OPTIM, loop, settings()), regression_loss(first),
                         stop_after=2, show_progress=False)
    torch.manual_seed(123)  # the checkpoint restores every RNG: what the process drew meanwhile does not matter
    resumed = model()
    session = start_session(tmp_path / "b", resumed, OPTIM, loop, settings(), resume_checkpoint(tmp_path / "b", True))
    assert session.resumed and session.step == 2
    assert run_steps(session, regression_loss(resumed), show_progress=False)
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)

    def losses(run: str) -> list[float]:
        return [json.loads(line)["loss"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
    assert losses("b") == losses("a") and len(losses("a")) == 4


def test_resuming_with_another_setting_is_refused_unless_the_setting_may_change(tmp_path):
    loop = LoopConfig(max_steps=2, batch_size=8)
    net = model()
    run_steps(start_session(tmp_path, net, OPTIM, loop, settings(), None), regression_loss(net), show_progress=False)
    ckpt = resume_checkpoint(tmp_path, True)
    check_same_run(ckpt, settings(max_steps=10), tmp_path)  # a longer run: allowed
    with pytest.raises(LmlabError, match=r"train\.seed: 0 in the checkpoint, 1 now"):
        check_same_run(ckpt, settings(seed=1), tmp_path)


def test_stop_ends_the_run_early_with_a_checkpoint(tmp_path):
    net = model()
    session = start_session(tmp_path, net, OPTIM, LoopConfig(max_steps=10, batch_size=8, checkpoint_every=100,
                                                             log_every=1), settings())
    assert not run_steps(session, regression_loss(net), stop=lambda: session.step >= 3, show_progress=False)
    assert session.step == 3 and [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["step_0000003.pt"]
    rows = session.metrics.read()
    assert [row["step"] for row in rows] == [1, 2, 3] and {"loss", "lr", "grad_norm", "step_s", "rows"} <= rows[0].keys()
    assert (tmp_path / "loss.png").is_file()


def test_a_batch_that_does_not_split_into_the_parts_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    with pytest.raises(LmlabError, match="--batch-size 6 is not divisible by --grad-accum 4"):
        LoopConfig(max_steps=2, batch_size=6, grad_accum=4)
    monkeypatch.setattr(distributed, "current", lambda: distributed.Dist(world_size=4))  # 4 processes
    with pytest.raises(LmlabError, match="--batch-size 6 must be a multiple of the processes \\(4\\) x --grad-accum"):
        start_session(tmp_path / "run", model(), OPTIM, LoopConfig(max_steps=2, batch_size=6, grad_accum=2), {})
    assert not (tmp_path / "run").exists()


def test_bf16_autocast_trains_and_evaluates():
    net = model()
    session = start_session(None, net, OPTIM, LoopConfig(max_steps=2, batch_size=8, bf16=True, eval_every=1), {})
    seen = []

    def step_loss(step, part, parts):
        out = net(X)
        seen.append(out.dtype)
        return ((out.float().squeeze(-1) - Y) ** 2).mean(), {}

    assert run_steps(session, step_loss, evaluate=lambda: {"val_dtype": float(net(X).dtype == torch.bfloat16)},
                     show_progress=False)
    assert seen == [torch.bfloat16, torch.bfloat16]


def test_warmup_ratio_replaces_warmup_steps():
    assert OptimConfig(warmup_steps=7).warmup(100) == 7
    assert OptimConfig(warmup_steps=7, warmup_ratio=0.25).warmup(100) == 25
    with pytest.raises(LmlabError, match="--beta2 1.5 must lie in"):
        OptimConfig(beta2=1.5)


def test_a_recipe_config_holds_its_loop_settings_as_one_loop_config():
    cfg = PostTrainConfig(loop=LoopConfig(max_steps=9, batch_size=4, grad_accum=2, eval_every=3, log_every=5))
    assert cfg.loop.max_steps == 9 and cfg.loop.replace(max_steps=2).max_steps == 2
    assert PostTrainConfig().loop == LoopConfig(max_steps=100, batch_size=8, eval_every=50, checkpoint_every=50,
                                                keep_checkpoints=2, log_every=1)  # the recipe's own defaults
    with pytest.raises(LmlabError, match="unknown loop setting"):
        cfg.loop.replace(lr=1.0)


def test_optimizer_settings_are_flags_of_their_own():
    parser = argparse.ArgumentParser()
    add_config_flags(parser, TrainConfig)
    args = parser.parse_args(["--lr", "0.01", "--beta2", "0.99", "--max-steps", "5"])
    cfg = TrainConfig(**config_overrides(args, TrainConfig))
    assert cfg.loop == TrainConfig().loop.replace(max_steps=5)  # the recipe's other loop defaults kept
    assert cfg.optim == TrainConfig().optim.replace(lr=0.01, beta2=0.99)
    assert "optim" not in config_overrides(parser.parse_args([]), TrainConfig)


def test_warmup_steps_given_replace_a_default_warmup_ratio_and_both_at_once_are_refused():
    by_share = OptimConfig(warmup_ratio=0.1)
    assert by_share.replace(warmup_steps=7).warmup(100) == 7
    assert by_share.replace(lr=1e-3).warmup(100) == 10  # other changes keep the share
    with pytest.raises(LmlabError, match="--warmup-steps and --warmup-ratio both set the warmup"):
        by_share.replace(warmup_steps=7, warmup_ratio=0.2)

"""PPO: on a toy reward it raises the reward; it resumes bit-exactly (PPO-ptx included); it reads a
reward function or a reward model; the KL coefficient adapts or stays; bad input is one line."""

import json

import pytest
import torch
from safetensors.torch import load_file

from chat_models import TINY_FLAGS, TINY_RUN, tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.config import OptimConfig
from lmlab.objectives.sft import response_batch
from lmlab.recipes.ppo import PPOConfig, ppo
from lmlab.recipes.reward import reward

pytestmark = pytest.mark.usefixtures("one_thread")

TOY = TINY_RUN.replace(peft="none", optim=OptimConfig(lr=1e-2, warmup_steps=1, weight_decay=0.0),
                       loop=TINY_RUN.loop.replace(batch_size=16, max_steps=60, eval_every=1000, checkpoint_every=1000),
                       task_eval_size=1)
TOY_PPO = PPOConfig(max_new_tokens=8, kl_coef=0.01)


def rows(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("base") / "tiny")


def test_ppo_raises_a_toy_reward(base, tmp_path):
    ppo(base, "task", tmp_path / "r", TOY, TOY_PPO, reward_fn="chat_models:ascii_letters", show_progress=False)
    rewards = [row["reward"] for row in rows(tmp_path / "r") if "reward" in row][::TOY_PPO.ppo_epochs]  # per rollout
    assert len(rewards) == 15
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.2  # a random model's ~0.3 rises past 0.5
    logged = rows(tmp_path / "r")[-2]
    assert {"reward", "kl", "kl_coef", "entropy", "clip_fraction", "approx_kl", "value_loss"} <= logged.keys()
    assert (tmp_path / "r" / "loss.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("method", ["lora", "none"])
def test_ppo_stopped_and_resumed_gives_bit_identical_weights(base, tmp_path, method):
    cfg = TINY_RUN.replace(peft=method, loop=TINY_RUN.loop.replace(max_steps=6, checkpoint_every=3))
    settings = PPOConfig(ppo_epochs=2, max_new_tokens=6, ptx_coef=0.5, ptx_data="markov", ptx_block_size=16)
    ppo(base, "task", tmp_path / "full", cfg, settings, show_progress=False)
    ppo(base, "task", tmp_path / "split", cfg, settings, stop_after=3, show_progress=False)  # mid-rollout
    ppo(base, "task", tmp_path / "split", cfg, settings, resume=True, show_progress=False)
    a, b = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("full", "split"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r.get("ptx_loss") for r in rows(tmp_path / "full")] == [r.get("ptx_loss") for r in rows(tmp_path / "split")]


def test_kl_coefficient_adapts_or_stays_fixed(base, tmp_path):
    cfg = TINY_RUN.replace(loop=TINY_RUN.loop.replace(max_steps=6))
    for adaptive in (True, False):
        ppo(base, "task", tmp_path / str(adaptive), cfg, PPOConfig(ppo_epochs=2, max_new_tokens=6, kl_coef=0.1,
                                                                   adaptive_kl=adaptive, kl_horizon=10),
            show_progress=False)
        coefs = {row["kl_coef"] for row in rows(tmp_path / str(adaptive)) if "kl_coef" in row}
        assert (len(coefs) == 3) if adaptive else (coefs == {0.1})


def test_ppo_against_a_reward_model(base, tmp_path):
    two_steps = TINY_RUN.replace(loop=TINY_RUN.loop.replace(max_steps=2))
    reward(base, "task", tmp_path / "rm", two_steps, show_progress=False)
    ppo(base, "task", tmp_path / "r", two_steps, PPOConfig(ppo_epochs=2, max_new_tokens=4),
        reward_model=tmp_path / "rm", show_progress=False)
    scored = [row["reward"] for row in rows(tmp_path / "r") if "reward" in row]
    assert len(scored) == 2 and all(isinstance(r, float) for r in scored)
    assert not all(r in (-0.5, 0.0, 0.2, 0.8, 1.0) for r in scored)  # the model's scores, not the task's


def test_response_batch_marks_the_reply_tokens():
    class Tok:
        pad_id, eos_id = 0, 9
    inputs, targets, mask = response_batch([[5, 6, 7], [5]], [[1, 2], [3, 4, 9]], Tok())
    assert inputs.tolist() == [[5, 6, 7, 1], [5, 3, 4, 9]]
    assert targets.tolist() == [[-100, -100, 1, 2], [3, 4, 9, -100]]
    assert mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 0]]


def test_cli_ppo_runs_and_reports(base, tmp_path, capsys):
    out = tmp_path / "r"
    assert lmlab("ppo", "--model", base, "--data", "task", "--out", out, *TINY_FLAGS, "--ppo-epochs", "2",
                 "--max-new-tokens", "4") == 0
    assert "task reward" in capsys.readouterr().out and (out / "model" / "model.safetensors").is_file()


@pytest.mark.parametrize("extra, data, message", [
    (["--reward-fn", "no_such_module:f"], "task", "cannot load reward function"),
    (["--reward-fn", "justaname"], "task", "module:function"),
    ([], "prompts.jsonl", "needs a reward for the replies"),
    (["--reward-fn", "lmlab.data.tasks:reward", "--reward-model", "x"], "task", "not both"),
    (["--reward-fn", "lmlab.data.tasks:reward"], "bad.jsonl", "bad.jsonl:2 is not valid JSON"),
    (["--reward-fn", "lmlab.data.tasks:reward"], "roles.jsonl", "role 'robot'"),
    (["--reward-model", "nowhere"], "task", "holds no reward model"),
    (["--kl-target", "0"], "task", "--kl-target 0.0 must be greater than 0"),
    (["--temperature", "0.005"], "task", "--temperature 0.005 must be at least 0.01"),
])
def test_bad_input_is_one_line_and_writes_nothing(base, tmp_path, capsys, extra, data, message):
    (tmp_path / "prompts.jsonl").write_text('{"messages": [{"role": "user", "content": "Hi"}]}\n')
    (tmp_path / "bad.jsonl").write_text('{"messages": [{"role": "user", "content": "Hi"}]}\n{oops\n')
    (tmp_path / "roles.jsonl").write_text('{"messages": [{"role": "robot", "content": "Hi"}]}\n')
    path = data if data == "task" else str(tmp_path / data)
    out = tmp_path / "out"
    assert lmlab("ppo", "--model", base, "--data", path, "--out", out, *TINY_FLAGS, *extra) == 2
    one_line_error(capsys, message)
    assert not out.exists()

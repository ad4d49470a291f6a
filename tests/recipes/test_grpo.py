"""GRPO: on an easy reward from the user's own file it raises the reward; replies come in groups of K per
prompt; it resumes bit-exactly; rewards sum with weights (task, regex, function, reward model); the command
reports in text and JSON; bad input is one line and writes nothing; two processes train as one."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from chat_models import TINY_FLAGS, TINY_RUN, tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.config import LoopConfig, OptimConfig
from lmlab.data.tasks import task_prompts
from lmlab.errors import LmlabError
from lmlab.models.load import load
from lmlab.recipes.grpo import GRPOConfig, grpo, rollout
from lmlab.recipes.reward import reward
from lmlab.tokenizers.chat import chat_prompt
from lmlab.training.post_training import PostTrainConfig
from lmlab.training.reward_mix import reward_mix
from real_models import real_model

pytestmark = pytest.mark.usefixtures("one_thread")

TOY = TINY_RUN.replace(peft="none", optim=OptimConfig(lr=1e-2, warmup_steps=1, weight_decay=0.0),
                       loop=TINY_RUN.loop.replace(batch_size=4, max_steps=40, eval_every=1000, checkpoint_every=1000),
                       task_eval_size=1)
LETTERS = "def letters(prompt, reply):\n    return sum(c.isascii() and c.isalpha() for c in reply) / max(len(reply), 1)\n"


def rows(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("base") / "tiny")


@pytest.fixture
def grader(tmp_path):
    (tmp_path / "grader.py").write_text(LETTERS + "def text(prompt, reply):\n    return 'high'\n")
    return tmp_path / "grader.py"


def test_grpo_raises_an_easy_reward_from_the_users_own_file(base, tmp_path, grader):
    grpo(base, "task", tmp_path / "r", TOY, GRPOConfig(max_new_tokens=8, kl_coef=0.01), reward_fn=f"{grader}:letters",
         show_progress=False)
    rewards = [row["reward"] for row in rows(tmp_path / "r") if "reward" in row]
    assert len(rewards) == 40
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.1  # a random model's ~0.3 rises past 0.4
    logged = rows(tmp_path / "r")[-2]
    assert {"reward", "reward_fn", "kl", "kl_k3", "clip_fraction", "flat_groups", "reply_tokens"} <= logged.keys()
    assert (tmp_path / "r" / "loss.png").read_bytes().startswith(b"\x89PNG")


def test_a_rollout_holds_k_replies_to_each_prompt_with_advantages_against_their_group(base):
    model, tokenizer = load(base)
    prompts = task_prompts(3, seed=1)
    mix = reward_mix("task", 48, reward_regex="[a-z]+")
    batch = rollout(model, None, tokenizer, prompts, mix, GRPOConfig(replies_per_prompt=4, max_new_tokens=6), seed=0)
    assert batch["inputs"].shape[0] == 12 and "ref_logprobs" not in batch and "old_logprobs" not in batch
    prompt_length = len(tokenizer.encode(chat_prompt(tokenizer, prompts[0])))
    heads = batch["inputs"][:, :prompt_length].view(3, 4, -1)  # the group's rows start with the same prompt
    assert all(torch.equal(group[0], group[k]) for group in heads for k in range(4))
    assert torch.allclose(batch["advantages"].view(3, 4).sum(1), torch.zeros(3), atol=1e-5)


def test_grpo_stopped_and_resumed_gives_bit_identical_weights(base, tmp_path):
    cfg = TINY_RUN.replace(peft="none", loop=TINY_RUN.loop.replace(max_steps=6, checkpoint_every=3))
    settings = GRPOConfig(iterations=2, replies_per_prompt=2, max_new_tokens=6)
    grpo(base, "task", tmp_path / "full", cfg, settings, show_progress=False)
    grpo(base, "task", tmp_path / "split", cfg, settings, stop_after=3, show_progress=False)  # mid-rollout
    grpo(base, "task", tmp_path / "split", cfg, settings, resume=True, show_progress=False)
    a, b = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("full", "split"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r.get("kl_k3") for r in rows(tmp_path / "full")] == [r.get("kl_k3") for r in rows(tmp_path / "split")]


def test_rewards_sum_with_their_weights_and_a_reward_model_scores_too(base, tmp_path, grader):
    two_steps = TINY_RUN.replace(loop=TINY_RUN.loop.replace(max_steps=2))
    reward(base, "task", tmp_path / "rm", two_steps, show_progress=False)
    grpo(base, "task", tmp_path / "r", two_steps, GRPOConfig(max_new_tokens=4), reward_regex=r"\S+",
         reward_fn=f"{grader}:letters", reward_model=tmp_path / "rm", task_reward=True,
         reward_weights={"regex": 0.5, "fn": 2.0}, show_progress=False)
    logged = [row for row in rows(tmp_path / "r") if "reward" in row]
    assert len(logged) == 2 and json.loads((tmp_path / "r" / "run.json").read_text())["reward_weights"] == {
        "task": 1.0, "regex": 0.5, "fn": 2.0, "model": 1.0}
    for row in logged:
        expected = row["reward_task"] + 0.5 * row["reward_regex"] + 2.0 * row["reward_fn"] + row["reward_model"]
        assert row["reward"] == pytest.approx(expected, abs=1e-5)


def test_cli_grpo_reports_in_text_and_json(base, tmp_path, capsys):
    flags = ["--model", base, "--data", "task", *TINY_FLAGS, "--max-new-tokens", "4", "--replies-per-prompt", "2"]
    assert lmlab("grpo", *flags, "--out", tmp_path / "a") == 0
    assert "task reward" in capsys.readouterr().out and (tmp_path / "a" / "model" / "model.safetensors").is_file()
    assert lmlab("grpo", *flags, "--out", tmp_path / "b", "--json", "--no-scale-rewards", "--average", "token") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["finished"] and result["step"] == 4 and "task_reward" in result["after"]


@pytest.mark.parametrize("extra, data, message", [
    (["--reward-fn", "missing.py:letters"], "task", "no file missing.py"),
    (["--reward-fn", "GRADER:nothing"], "task", "has no attribute 'nothing'"),
    (["--reward-fn", "BROKEN:f"], "task", "raised ZeroDivisionError"),
    (["--replies-per-prompt", "1"], "task", "--replies-per-prompt 1 must be at least 2"),
    (["--reward-regex", "(unclosed"], "task", "is not a regular expression"),
    (["--reward-regex", "x", "--reward-weight", "fn=2"], "task", "weighs a reward not in use"),
    (["--reward-weight", "task=lots"], "task", "must be NAME=W"),
    (["--task-reward"], "prompts.jsonl", "use it with --data task"),
    ([], "prompts.jsonl", "needs a reward for the replies"),
])
def test_bad_input_is_one_line_and_writes_nothing(base, tmp_path, capsys, grader, extra, data, message):
    (tmp_path / "prompts.jsonl").write_text('{"messages": [{"role": "user", "content": "Hi"}]}\n')
    (tmp_path / "broken.py").write_text("1 / 0\n")
    extra = [e.replace("GRADER", str(grader)).replace("BROKEN", str(tmp_path / "broken.py")) for e in extra]
    path = data if data == "task" else str(tmp_path / data)
    out = tmp_path / "out"
    assert lmlab("grpo", "--model", base, "--data", path, "--out", out, *TINY_FLAGS, *extra) == 2
    one_line_error(capsys, message)
    assert not out.exists()


def test_a_reward_function_that_returns_no_number_stops_the_run_in_one_line(base, tmp_path, grader):
    with pytest.raises(LmlabError, match="returned 'high'.*must return a finite number"):
        grpo(base, "task", tmp_path / "r", TINY_RUN, GRPOConfig(max_new_tokens=4), reward_fn=f"{grader}:text",
             show_progress=False)


@pytest.mark.slow  # ~20 s: torchrun starts three processes
def test_two_processes_train_as_one_with_two_micro_batches(base, tmp_path):
    common = ["grpo", "--model", base, "--data", "task", *TINY_FLAGS, "--max-new-tokens", "4", "--iterations", "2",
              "--log-every", "1", "--device", "cpu"]
    assert lmlab(*common, "--grad-accum", "2", "--out", tmp_path / "one") == 0
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "lmlab.cli.main", *map(str, common), "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, timeout=300, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    one, two = rows(tmp_path / "one"), rows(tmp_path / "two")
    losses = [r["loss"] for r in one if "loss" in r]  # near 0 where the ratio is 1 and the advantages sum to 0
    assert [r["loss"] for r in two if "loss" in r] == pytest.approx(losses, rel=1e-5, abs=1e-6)
    ones, twos = (load_file(tmp_path / run / "adapter" / "adapter_model.safetensors") for run in ("one", "two"))
    for name in ones:
        torch.testing.assert_close(twos[name], ones[name], rtol=1e-4, atol=1e-5, msg=name)


def test_the_output_may_not_be_the_reward_functions_file(base, grader, capsys):
    assert lmlab("grpo", "--model", base, "--data", "task", "--out", grader, "--reward-fn", f"{grader}:letters",
                 *TINY_FLAGS) == 2
    one_line_error(capsys, "--reward-fn")
    assert grader.read_text().startswith("def letters")


@pytest.mark.slow
def test_grpo_runs_lora_steps_on_smollm2_with_a_reward_from_a_file(tmp_path):
    """End to end on the real SmolLM2-135M-Instruct: four LoRA steps of two prompts with four replies each,
    rewarded by the share of letters in the reply (a user's file); every logged step has a reward and a KL,
    the policy moves away from its reference, and the run's adapter loads onto its base."""
    (tmp_path / "letters.py").write_text(LETTERS)
    cfg = PostTrainConfig(loop=LoopConfig(max_steps=4, batch_size=2, eval_every=4, checkpoint_every=4, log_every=1),
                          block_size=96, optim=PostTrainConfig.optim.replace(lr=2e-3, warmup_steps=1),
                          task_size=20, task_eval_size=2)
    out = tmp_path / "r"
    result = grpo(real_model("smollm2-135m-instruct"), "task", out, cfg,
                  GRPOConfig(replies_per_prompt=4, max_new_tokens=12, temperature=1.0),
                  reward_fn=f"{tmp_path / 'letters.py'}:letters", show_progress=False)
    logged = [row for row in rows(out) if "reward" in row]
    assert result.finished and len(logged) == 4
    assert all(0 <= row["reward"] <= 1 and row["kl"] >= 0 for row in logged) and logged[-1]["kl"] > 0
    model, _ = load(out)
    assert not model.training

"""DPO: the loss starts at log 2 (policy = reference), falls as the margin grows, resumes bit-exactly
with either reference (adapters off, or log-probs computed once and kept in the checkpoints)."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from chat_models import TINY_FLAGS, TINY_RUN, ascii_letters, tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.data.tasks import preference_pairs
from lmlab.recipes.dpo import DPOConfig, dpo
from lmlab.recipes.sft import sft
from lmlab.training.checkpoint import list_checkpoints, load_checkpoint
from lmlab.training.preference_data import load_pairs, sampled_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

RUN = TINY_RUN.replace(loop=TINY_RUN.loop.replace(max_steps=6, eval_every=3, checkpoint_every=3))
LR = {"lora": 1e-2, "none": 3e-3}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("base") / "tiny")


@pytest.mark.parametrize("method", ["lora", "none"])
def test_dpo_stopped_and_resumed_gives_bit_identical_weights(base, tmp_path, method):
    cfg = RUN.replace(peft=method, optim=RUN.optim.replace(lr=LR[method]))
    dpo(base, "task", tmp_path / "full", cfg, show_progress=False)
    dpo(base, "task", tmp_path / "split", cfg, stop_after=2, show_progress=False)
    dpo(base, "task", tmp_path / "split", cfg, resume=True, show_progress=False)
    a, b = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("full", "split"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", ["lora", "none"])
def test_dpo_starts_at_log_2_and_learns_to_prefer_the_chosen_answers(base, tmp_path, method):
    result = dpo(base, "task", tmp_path / "r", RUN.replace(peft=method, optim=RUN.optim.replace(lr=LR[method]),
                                                           loop=RUN.loop.replace(max_steps=8)), DPOConfig(beta=0.5),
                 show_progress=False)
    assert result.before["val_loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert result.before["val_margin"] == pytest.approx(0.0, abs=1e-4)
    assert result.after["val_loss"] < math.log(2) - 0.1 and result.after["val_margin"] > 0.2
    assert {"task_reward", "task_accuracy"} <= result.before.keys() & result.after.keys()
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert all({"margin", "accuracy"} <= row.keys() for row in rows if "loss" in row)


def test_without_peft_the_reference_log_probs_are_computed_once_and_checkpointed(base, tmp_path):
    dpo(base, "task", tmp_path / "r", RUN.replace(peft="none", optim=RUN.optim.replace(lr=LR["none"])), stop_after=3, show_progress=False)
    first = load_checkpoint(list_checkpoints(tmp_path / "r" / "checkpoints")[-1])["state"]["reference"]
    dpo(base, "task", tmp_path / "r", RUN.replace(peft="none", optim=RUN.optim.replace(lr=LR["none"])), resume=True, show_progress=False)
    last = load_checkpoint(list_checkpoints(tmp_path / "r" / "checkpoints")[-1])["state"]["reference"]
    n_pairs = len(load_pairs("task", RUN))
    assert first["train"].shape[1] == 2 and len(first["train"]) + len(first["val"]) == n_pairs
    assert torch.equal(first["train"], last["train"]) and torch.equal(first["val"], last["val"])


def test_rankings_become_all_their_pairs(tmp_path):
    data = tmp_path / "prefs.jsonl"
    data.write_text(json.dumps({"prompt": "What is 1 + 1?", "ranked": ["<answer>2</answer>", "2", "3"]}) + "\n")
    assert [(c, r) for _, c, r in load_pairs(str(data), RUN)] == [("<answer>2</answer>", "2"),
                                                                  ("<answer>2</answer>", "3"), ("2", "3")]


def test_cli_dpo_on_the_task_reports_the_task_reward_before_and_after(base, tmp_path, capsys):
    assert lmlab("dpo", "--model", base, "--data", "task", "--out", tmp_path / "r", *TINY_FLAGS, "--beta", "0.2") == 0
    out = capsys.readouterr().out
    assert "task reward:" in out and "held-out preference accuracy:" in out


def test_cli_dpo_bad_beta_and_repeated_answers_are_one_line_exit_2(base, tmp_path, capsys):
    assert lmlab("dpo", "--model", base, "--data", "task", "--out", tmp_path / "r", *TINY_FLAGS, "--beta", "0") == 2
    one_line_error(capsys, "--beta 0.0 must be positive")
    data = tmp_path / "prefs.jsonl"
    data.write_text(json.dumps({"prompt": "What is 1 + 1?", "ranked": ["2", "3", "2"]}) + "\n")
    assert lmlab("dpo", "--model", base, "--data", data, "--out", tmp_path / "r", *TINY_FLAGS) == 2
    one_line_error(capsys, ":1:", "'2' appears twice")
    assert not (tmp_path / "r").exists()


def test_cli_dpo_reads_trls_implicit_prompt_pairs_as_the_explicit_ones(base, tmp_path, capsys):
    pairs = preference_pairs(12)
    data = tmp_path / "prefs.jsonl"
    data.write_text("".join(json.dumps({"chosen": [*prompt, {"role": "assistant", "content": chosen}],
                                        "rejected": [*prompt, {"role": "assistant", "content": rejected}]}) + "\n"
                            for prompt, chosen, rejected in pairs))
    assert load_pairs(str(data), RUN) == pairs
    assert lmlab("dpo", "--model", base, "--data", data, "--out", tmp_path / "r", *TINY_FLAGS) == 0
    assert "held-out preference accuracy:" in capsys.readouterr().out


def test_dpo_continuing_a_saved_adapter_takes_it_as_the_reference(base, tmp_path):
    sft(base, "task", tmp_path / "sft", TINY_RUN.replace(peft="adapter", adapter_bottleneck=4,
                                                         loop=TINY_RUN.loop.replace(max_steps=2)),
        show_progress=False)
    result = dpo(base, "task", tmp_path / "dpo", RUN.replace(loop=RUN.loop.replace(max_steps=2)),
                 adapter=tmp_path / "sft" / "adapter", show_progress=False)
    assert result.before["val_loss"] == pytest.approx(math.log(2), abs=1e-4)  # the reference is the SFT adapter
    state = load_checkpoint(list_checkpoints(tmp_path / "dpo" / "checkpoints")[-1])["state"]
    assert "reference" in state and result.adapter_dir is not None and result.model_dir is None


def test_sampled_pairs_put_the_better_reply_first(base):
    from lmlab.models.load import load
    model, tokenizer = load(base)
    prompts = load_pairs("task", RUN)[:6]
    pairs = sampled_pairs(model, tokenizer, [p for p, _, _ in prompts], ascii_letters, k=4, max_new_tokens=6)
    assert 0 < len(pairs) <= 6
    assert all(ascii_letters(p, chosen) > ascii_letters(p, rejected) for p, chosen, rejected in pairs)
    again = sampled_pairs(model, tokenizer, [p for p, _, _ in prompts], ascii_letters, k=4, max_new_tokens=6)
    assert again == pairs  # seeded: a resumed run samples the same pairs


def test_a_reference_reply_is_chosen_over_the_models_mistakes(base):
    from lmlab.data.tasks import perfect_reply, reward
    from lmlab.models.load import load
    from lmlab.training.rewards import prompts_and_replies
    model, tokenizer = load(base)
    rows = prompts_and_replies("task", RUN)[:6]
    assert all(reward(prompt, reply) == 1.0 and reply == perfect_reply(prompt) for prompt, reply in rows)
    prompts, references = [p for p, _ in rows], [r for _, r in rows]
    alone = sampled_pairs(model, tokenizer, prompts, reward, k=2, max_new_tokens=6)
    pairs = sampled_pairs(model, tokenizer, prompts, reward, k=2, max_new_tokens=6, references=references)
    assert len(pairs) == 6 > len(alone)  # an untrained model's two samples often score alike; the reference never does
    assert all(chosen == perfect_reply(prompt) and reward(prompt, rejected) < 1.0 for prompt, chosen, rejected in pairs)


def test_dpo_on_sampled_pairs_learns_and_resumes_exactly(base, tmp_path):
    cfg = RUN.replace(peft="lora", optim=RUN.optim.replace(lr=LR["lora"]))
    kwargs = dict(dpo_cfg=DPOConfig(beta=0.5, sample_pairs=4, sample_max_new_tokens=8),
                  reward_fn="chat_models:ascii_letters", show_progress=False)
    full = dpo(base, "task", tmp_path / "full", cfg, **kwargs)
    dpo(base, "task", tmp_path / "split", cfg, stop_after=2, **kwargs)
    dpo(base, "task", tmp_path / "split", cfg, resume=True, **kwargs)
    a, b = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("full", "split"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert full.after["val_margin"] > full.before["val_margin"]
    assert json.loads((tmp_path / "full" / "run.json").read_text())["sample_pairs"] == 4


def test_dpo_sampling_without_a_reward_is_one_line(base, tmp_path, capsys):
    (tmp_path / "prompts.jsonl").write_text('{"messages": [{"role": "user", "content": "Hi"}]}\n')
    assert lmlab("dpo", "--model", base, "--data", tmp_path / "prompts.jsonl", "--out", tmp_path / "o",
                 "--sample-pairs", "2", *TINY_FLAGS) == 2
    one_line_error(capsys, "needs a reward for the replies")
    assert not (tmp_path / "o").exists()


def test_dpo_sampling_one_reply_per_prompt_is_one_line(base, tmp_path, capsys):
    assert lmlab("dpo", "--model", base, "--data", "task", "--out", tmp_path / "o", "--sample-pairs", "1",
                 *TINY_FLAGS) == 2
    one_line_error(capsys, "sample at least 2")
    assert not (tmp_path / "o").exists()

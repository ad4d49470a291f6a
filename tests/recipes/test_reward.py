"""Reward models: a scalar head read at the last real token, InstructGPT's ranking loss, a run that
learns to order held-out answers, resumes exactly, and saves what `load_reward_model` reads back."""

import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from chat_models import TINY_FLAGS, TINY_RUN, tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.data.tasks import preference_pairs
from lmlab.errors import LmlabError
from lmlab.heads.reward import RewardModel, last_token_index
from lmlab.losses.bradley_terry import bradley_terry_loss
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.models.tuned_files import REWARD_HEAD_FILE, load_reward_model
from lmlab.recipes.reward import reward
from lmlab.training.loop import evaluated
from lmlab.training.post_training import split_examples
from lmlab.training.preference import ranking_chats
from lmlab.training.preference_data import load_rankings
from lmlab.training.reward_model import chat_rewards, ranking_loss

pytestmark = pytest.mark.usefixtures("one_thread")

RUN = TINY_RUN.replace(loop=TINY_RUN.loop.replace(max_steps=6, eval_every=3, checkpoint_every=3),
                       optim=TINY_RUN.optim.replace(lr=3e-2))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("base") / "tiny")


def test_the_reward_is_read_at_the_last_real_token_whatever_the_padding():
    torch.manual_seed(0)
    model = RewardModel(build_decoder(preset("llama-tiny", vocab_size=50, context_length=16, n_layers=1, n_heads=2,
                                             n_kv_heads=1, d_model=16, d_ff=32))).eval()
    ids = torch.randint(3, 50, (1, 5))
    alone = model(ids)  # (1,)
    pad = torch.zeros(1, 3, dtype=torch.long)
    right = model(torch.cat([ids, pad], 1), torch.tensor([[1] * 5 + [0] * 3]))
    left = model(torch.cat([pad, ids], 1), torch.tensor([[0] * 3 + [1] * 5]))
    torch.testing.assert_close(right, alone)
    torch.testing.assert_close(left, alone, rtol=1e-5, atol=1e-6)
    assert last_token_index(torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1]])).tolist() == [2, 3]


def test_ranking_loss_averages_every_pair_of_a_prompt_then_the_prompts():
    scores = torch.tensor([3.0, 1.0, 2.0, 0.5, 1.5])  # a ranking of 3 answers, then one of 2
    loss, correct = ranking_loss(scores, [3, 2])
    first = bradley_terry_loss(torch.tensor([3.0, 3.0, 1.0]), torch.tensor([1.0, 2.0, 2.0]))
    second = bradley_terry_loss(torch.tensor([0.5]), torch.tensor([1.5]))
    torch.testing.assert_close(loss, (first + second) / 2)
    assert correct.tolist() == [1.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("method", ["lora", "none"])
def test_reward_model_learns_to_order_held_out_answers_and_loads_back(base, tmp_path, method):
    out = tmp_path / "rm"
    result = reward(base, "task", out, RUN.replace(peft=method, optim=RUN.optim.replace(lr=3e-2 if method == "lora" else 3e-3)), k=4,
                    show_progress=False)
    assert result.after["val_accuracy"] > result.before["val_accuracy"] + 0.2
    assert result.after["val_loss"] < result.before["val_loss"]
    assert (out / REWARD_HEAD_FILE).is_file() and (out / ("adapter" if method == "lora" else "model")).is_dir()
    reward_model, tokenizer = load_reward_model(out)
    _, val = split_examples(load_rankings("task", RUN, 4), RUN.val_fraction, RUN.loop.seed)

    def accuracy():
        return ranking_loss(chat_rewards(reward_model, tokenizer, ranking_chats(val), RUN.block_size),
                            [4] * len(val))[1].mean()
    assert evaluated(reward_model, accuracy).item() == pytest.approx(result.after["val_accuracy"], abs=1e-6)


def test_reward_stopped_and_resumed_gives_bit_identical_weights(base, tmp_path):
    reward(base, "task", tmp_path / "full", RUN, show_progress=False)
    reward(base, "task", tmp_path / "split", RUN, stop_after=4, show_progress=False)
    reward(base, "task", tmp_path / "split", RUN, resume=True, show_progress=False)
    for name in (REWARD_HEAD_FILE, "adapter/adapter_model.safetensors"):
        a, b = load_file(tmp_path / "full" / name), load_file(tmp_path / "split" / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cli_reward_on_a_preference_file_reports_held_out_accuracy(base, tmp_path, capsys):
    data = tmp_path / "prefs.jsonl"
    rows = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in preference_pairs(8)]
    rows.append({"prompt": "What is 1 + 1?", "ranked": ["<answer>2</answer>", "2", "<answer>3</answer>"]})
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert lmlab("reward", "--model", base, "--data", data, "--out", tmp_path / "rm", *TINY_FLAGS) == 0
    assert "held-out pairwise accuracy" in capsys.readouterr().out


def test_cli_reward_chosen_equal_to_rejected_is_one_line_exit_2(base, tmp_path, capsys):
    data = tmp_path / "prefs.jsonl"
    data.write_text(json.dumps({"prompt": "What is 1 + 1?", "chosen": "2", "rejected": "3"}) + "\n"
                    + json.dumps({"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "4"}) + "\n")
    assert lmlab("reward", "--model", base, "--data", data, "--out", tmp_path / "rm", *TINY_FLAGS) == 2
    one_line_error(capsys, ":2:", "appears twice")
    assert not (tmp_path / "rm").exists()


def test_load_reward_model_of_a_directory_without_one_is_one_clear_error(tmp_path):
    with pytest.raises(LmlabError, match="no reward model"):
        load_reward_model(tmp_path)


@pytest.mark.parametrize("damage, message", [
    (lambda head: {"proj.weight": head["proj.weight"][:, :-1], "proj.bias": head["proj.bias"]}, "has shape"),
    (lambda head: head | {"proj.weight": torch.full_like(head["proj.weight"], float("nan"))}, "holds NaN or infinite values"),
])
def test_a_damaged_reward_head_is_refused_in_one_line(base, tmp_path, damage, message):
    out = tmp_path / "rm"
    reward(base, "task", out, RUN.replace(loop=RUN.loop.replace(max_steps=1, eval_every=1, checkpoint_every=1)),
           show_progress=False)
    save_file(damage(load_file(out / REWARD_HEAD_FILE)), out / REWARD_HEAD_FILE)
    with pytest.raises(LmlabError, match="^[^\n]*$") as error:
        load_reward_model(out)
    assert re.search(message, str(error.value))

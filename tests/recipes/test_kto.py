"""KTO: the loss starts at the weights' mean / 2 (policy = reference), falls as desirable answers rise above
the reference point and undesirable ones sink below it; resumes bit-exactly; reads TRL's unpaired format."""

import json

import pytest
import torch
from safetensors.torch import load_file

from chat_models import TINY_FLAGS, TINY_RUN, tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.config import LoopConfig
from lmlab.data.tasks import preference_pairs
from lmlab.recipes.kto import KTOConfig, kto
from lmlab.training.checkpoint import list_checkpoints, load_checkpoint
from lmlab.training.post_training import PostTrainConfig
from lmlab.training.preference_data import load_unpaired
from real_models import real_model

pytestmark = pytest.mark.usefixtures("one_thread")

RUN = TINY_RUN.replace(loop=TINY_RUN.loop.replace(max_steps=6, eval_every=3, checkpoint_every=3))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("base") / "tiny")


def test_cli_kto_on_the_task_lowers_its_loss_from_one_half(base, tmp_path, capsys):
    assert lmlab("kto", "--model", base, "--data", "task", "--out", tmp_path / "r", *TINY_FLAGS, "--max-steps", "8",
                 "--beta", "0.5", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    before, after = result["before"], result["after"]
    assert before["val_loss"] == pytest.approx(0.5, abs=1e-4) and before["val_kl"] == 0.0
    assert after["val_loss"] < 0.5 - 0.05 and after["val_accuracy"] > before["val_accuracy"]
    assert {"task_reward", "task_accuracy"} <= after.keys() and result["adapter_dir"] is not None


def test_kto_without_peft_keeps_the_reference_in_checkpoints_and_resumes_exactly(base, tmp_path):
    cfg = RUN.replace(peft="none", optim=RUN.optim.replace(lr=3e-3))
    settings = KTOConfig(beta=0.5, desirable_weight=1.2)
    kto(base, "task", tmp_path / "full", cfg, settings, show_progress=False)
    kto(base, "task", tmp_path / "split", cfg, settings, stop_after=3, show_progress=False)
    kto(base, "task", tmp_path / "split", cfg, settings, resume=True, show_progress=False)
    a, b = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("full", "split"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    reference = load_checkpoint(list_checkpoints(tmp_path / "split" / "checkpoints")[-1])["state"]["reference"]
    assert reference["train"].shape[1] == 2  # each example's answer and its mismatched one


def test_task_examples_alternate_desirable_and_undesirable_answers_one_per_question():
    rows = load_unpaired("task", RUN)
    assert [label for _, _, label in rows[:4]] == [True, False, True, False]
    assert len({json.dumps(prompt) for prompt, _, _ in rows}) == len(rows)


def test_trls_unpaired_format_is_read_standard_and_conversational(base, tmp_path, capsys):
    pairs = preference_pairs(16, seed=1)
    data = tmp_path / "labelled.jsonl"
    data.write_text("".join(
        json.dumps({"prompt": prompt, "completion": [{"role": "assistant", "content": chosen if i % 2 else rejected}],
                    "label": bool(i % 2)}) + "\n" for i, (prompt, chosen, rejected) in enumerate(pairs))
        + json.dumps({"prompt": "What is 2 + 2?", "completion": "4", "label": True}) + "\n")
    rows = load_unpaired(str(data), RUN)
    assert rows[1] == (pairs[1][0], pairs[1][1], True) and rows[2][1:] == (pairs[2][2], False)
    assert rows[-1] == ([{"role": "user", "content": "What is 2 + 2?"}], "4", True)
    assert lmlab("kto", "--model", base, "--data", data, "--out", tmp_path / "r", *TINY_FLAGS) == 0
    assert "held-out loss:" in capsys.readouterr().out


def test_cli_kto_missing_or_bad_label_and_bad_weight_are_one_line_exit_2(base, tmp_path, capsys):
    data = tmp_path / "labelled.jsonl"
    data.write_text(json.dumps({"prompt": "Hi", "completion": "Hello", "label": True}) + "\n"
                    + json.dumps({"prompt": "Hi", "completion": "Go away"}) + "\n")
    assert lmlab("kto", "--model", base, "--data", data, "--out", tmp_path / "r", *TINY_FLAGS) == 2
    one_line_error(capsys, "labelled.jsonl:2 has no 'label'", '"label": true or false')
    data.write_text(json.dumps({"prompt": "Hi", "completion": "Hello", "label": "good"}) + "\n")
    assert lmlab("kto", "--model", base, "--data", data, "--out", tmp_path / "r", *TINY_FLAGS) == 2
    one_line_error(capsys, "labelled.jsonl:1: 'label' is 'good'")
    assert lmlab("kto", "--model", base, "--data", "task", "--out", tmp_path / "r", "--undesirable-weight", "0") == 2
    one_line_error(capsys, "--undesirable-weight")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_kto_lowers_its_held_out_loss_on_smollm2(tmp_path):
    """End to end on the real SmolLM2-135M-Instruct: eight LoRA steps on the task's answers, labelled."""
    cfg = PostTrainConfig(loop=LoopConfig(max_steps=8, batch_size=4, eval_every=8, checkpoint_every=8,
                                          keep_checkpoints=2, log_every=1), block_size=64,
                          optim=PostTrainConfig.optim.replace(lr=1e-3), task_size=100, task_eval_size=4)
    result = kto(real_model("smollm2-135m-instruct"), "task", tmp_path / "r", cfg, KTOConfig(beta=0.5),
                 show_progress=False)
    assert result.before["val_loss"] == pytest.approx(0.5, abs=1e-4)
    assert result.after["val_loss"] < 0.5 and result.after["val_accuracy"] > result.before["val_accuracy"]

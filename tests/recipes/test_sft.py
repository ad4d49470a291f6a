"""SFT: the fine-tuning session resumes bit-exactly, lowers the loss, saves what `lmlab.load` and
`lmlab generate` read back, and refuses bad input with one line before writing anything."""

import json
import os
import signal

import pytest
import torch
from safetensors.torch import load_file

from chat_models import CHATML, TINY_FLAGS, TINY_RUN, tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.config import LoopConfig
from lmlab.data.tasks import task_examples
from lmlab.errors import LmlabError
from lmlab.models.load import load
from lmlab.models.peft_files import load_peft
from lmlab.models.tuned_files import load_tuned
from lmlab.modules.peft import LoRALinear, adapters_disabled
from lmlab.recipes.sft import sft
from lmlab.training.checkpoint import list_checkpoints
from lmlab.training.loop import run_steps
from lmlab.training.post_training import PostTrainConfig, load_tunable, run_settings, start_tuning
from real_models import real_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("base") / "tiny")


@pytest.fixture(scope="module")
def other_base(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("other") / "tiny", seed=1)


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_sft_with_lora_stopped_and_resumed_gives_bit_identical_weights(base, tmp_path):
    full = sft(base, "task", tmp_path / "full", TINY_RUN, show_progress=False)
    first = sft(base, "task", tmp_path / "split", TINY_RUN, stop_after=3, show_progress=False)
    assert not first.finished and first.step == 3 and first.model_dir is None and first.adapter_dir is None
    second = sft(base, "task", tmp_path / "split", TINY_RUN, resume=True, show_progress=False)
    assert second.finished and second.step == 4
    for name in ("adapter/adapter_model.safetensors", "model/model.safetensors"):
        a, b = load_file(tmp_path / "full" / name), load_file(tmp_path / "split" / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["step"] for r in metrics(tmp_path / "split")] == [r["step"] for r in metrics(tmp_path / "full")]
    assert second.before == full.before and second.after == full.after


def test_sft_run_directory_holds_adapter_merged_model_metrics_and_curve(base, tmp_path):
    out = tmp_path / "run"
    result = sft(base, "task", out, TINY_RUN, show_progress=False)
    assert result.model_dir == out / "model" and result.adapter_dir == out / "adapter"
    assert {"val_loss", "task_reward", "task_accuracy"} <= result.before.keys() <= result.after.keys()
    assert (out / "loss.png").read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step_0000002.pt", "step_0000004.pt"]
    assert json.loads((out / "run.json").read_text())["base_model"] == str(base.resolve())
    merged, tokenizer = load(out)  # the run-directory rule: out/model, so `lmlab generate --model OUT` works
    assert tokenizer.chat_template == CHATML and not any(isinstance(m, LoRALinear) for m in merged.modules())
    adapted = load_peft(load(base)[0], out / "adapter")  # the adapter on its base computes the same
    ids = torch.tensor([tokenizer.encode("What is 3 + 4?")])
    torch.testing.assert_close(merged(ids), adapted(ids), rtol=1e-4, atol=1e-5)
    with adapters_disabled(adapted):
        assert not torch.allclose(merged(ids), adapted(ids))


@pytest.mark.parametrize("method,lr,drop", [("none", 1e-2, 1.0), ("lora", 3e-2, 0.2)])  # LoRA on random weights is slow
def test_sft_lowers_the_held_out_loss_on_the_replies(base, tmp_path, method, lr, drop):
    cfg = TINY_RUN.replace(peft=method, loop=TINY_RUN.loop.replace(max_steps=12, eval_every=12, checkpoint_every=12),
                           optim=TINY_RUN.optim.replace(lr=lr))
    result = sft(base, "task", tmp_path / "r", cfg, show_progress=False)
    assert result.after["val_loss"] < result.before["val_loss"] - drop


@pytest.mark.parametrize("method", ["adapter", "prefix", "prompt", "none"])
def test_every_peft_method_trains_and_saves_its_result(base, tmp_path, method):
    cfg = TINY_RUN.replace(peft=method, loop=TINY_RUN.loop.replace(max_steps=2), n_prefix=2, n_prompt_tokens=2,
                           adapter_bottleneck=4, task_eval_size=1)
    result = sft(base, "task", tmp_path / "r", cfg, show_progress=False)
    if method == "none":  # the whole model, with its tokenizer: lmlab generate reads it
        assert result.adapter_dir is None and load(tmp_path / "r")[1].chat_template == CHATML
    else:  # the adapter alone, on the base model named in run.json
        assert result.model_dir is None and not (tmp_path / "r" / "model").exists()
        model, _ = load_tuned(tmp_path / "r")
        assert any(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("method", ["prefix", "lora"])
def test_a_run_directory_is_an_adapter_of_its_base_and_loads_in_eval_mode(base, tmp_path, method):
    """`--adapter RUN` (any command) takes a run directory, and `lmlab.load(RUN)` gives the same model, in eval
    mode: the adapter alone on its base (prefix) or the merged model (LoRA)."""
    cfg = TINY_RUN.replace(peft=method, loop=TINY_RUN.loop.replace(max_steps=2), n_prefix=2, task_eval_size=1)
    sft(base, "task", tmp_path / "r", cfg, show_progress=False)
    (of_run, tokenizer), (given, _) = load(tmp_path / "r"), load(base, adapter=tmp_path / "r")
    assert not of_run.training and not given.training
    ids = torch.tensor([tokenizer.encode("What is 3 + 4?")])
    torch.testing.assert_close(of_run(ids), given(ids), rtol=1e-4, atol=1e-5)


def test_ctrl_c_ends_the_session_after_the_step_in_flight_with_a_checkpoint(base, tmp_path):
    tuned = load_tunable(base, TINY_RUN)
    session = start_tuning(tmp_path, tuned.model, TINY_RUN, run_settings("sft", tuned, "x", [], TINY_RUN), None)

    def step_loss(step, part, parts):
        if step == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return sum(p.sum() for p in tuned.model.parameters() if p.requires_grad) * 0.0, {}

    assert not run_steps(session, step_loss, show_progress=False)
    assert session.step == 2 and [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["step_0000002.pt"]


def test_cli_sft_on_the_task_reports_the_score_before_and_after(base, tmp_path, capsys):
    assert lmlab("sft", "--model", base, "--data", "task", "--out", tmp_path / "r", *TINY_FLAGS) == 0
    out = capsys.readouterr().out
    assert "task reward" in out and "->" in out and f"{tmp_path / 'r'}" in out


def test_cli_sft_on_a_chat_file(base, tmp_path, capsys):
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": chat}) + "\n" for chat in task_examples(12)))
    assert lmlab("sft", "--model", base, "--data", data, "--out", tmp_path / "r", *TINY_FLAGS, "--pack") == 0
    assert (tmp_path / "r" / "model" / "model.safetensors").is_file()


def test_cli_sft_on_trls_prompt_completion_file(base, tmp_path, capsys):
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"prompt": chat[:-1], "completion": chat[-1:]}) + "\n"
                            for chat in task_examples(12)))
    assert lmlab("sft", "--model", base, "--data", data, "--out", tmp_path / "r", *TINY_FLAGS) == 0
    assert (tmp_path / "r" / "model" / "model.safetensors").is_file()


BAD_CHATS = {
    "malformed": (json.dumps({"messages": task_examples(1)[0]}) + '\n\n{"messages": [\n', ":3 is not valid JSON"),
    "missing role": ('{"messages": [{"content": "hi"}]}\n', ':1: messages must be a non-empty list of {"role"'),
    "unknown role": ('{"messages": [{"role": "bot", "content": "hi"}, {"role": "assistant", "content": "x"}]}\n',
                     "role 'bot'"),
    "no reply": ('{"messages": [{"role": "user", "content": "hi"}]}\n', "no assistant message"),
}


@pytest.mark.parametrize("case", list(BAD_CHATS))
def test_bad_chat_files_are_one_line_exit_2_and_write_nothing(base, tmp_path, capsys, case):
    text, fragment = BAD_CHATS[case]
    (tmp_path / "bad.jsonl").write_text(text)
    assert lmlab("sft", "--model", base, "--data", tmp_path / "bad.jsonl", "--out", tmp_path / "r", *TINY_FLAGS) == 2
    one_line_error(capsys, fragment)
    assert not (tmp_path / "r").exists()


def test_lora_target_matching_nothing_is_one_line_exit_2(base, tmp_path, capsys):
    assert lmlab("sft", "--model", base, "--data", "task", "--out", tmp_path / "r", *TINY_FLAGS,
                 "--lora-targets", "q_proj") == 2
    one_line_error(capsys, "LoRA target 'q_proj' matches no linear layer")
    assert not (tmp_path / "r").exists()


def test_adapter_or_resume_onto_another_base_model_is_one_line_exit_2(base, other_base, tmp_path, capsys):
    assert lmlab("sft", "--model", base, "--data", "task", "--out", tmp_path / "a", *TINY_FLAGS, "--peft", "adapter",
                 "--adapter-bottleneck", "4", "--stop-after", "2") == 0
    capsys.readouterr()
    run = tmp_path / "a"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*"))
    assert lmlab("sft", "--model", other_base, "--data", "task", "--out", run, *TINY_FLAGS, "--peft", "adapter",
                 "--adapter-bottleneck", "4", "--resume") == 2
    one_line_error(capsys, "resume with the --model it started from")
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*")) == before
    assert lmlab("sft", "--model", base, "--data", "task", "--out", run, *TINY_FLAGS, "--peft", "adapter",
                 "--adapter-bottleneck", "4", "--resume") == 0
    capsys.readouterr()
    assert lmlab("sft", "--model", other_base, "--data", "task", "--out", tmp_path / "b", *TINY_FLAGS,
                 "--adapter", run / "adapter") == 2
    one_line_error(capsys, "was trained on base model")
    assert not (tmp_path / "b").exists()


def test_resume_with_other_settings_or_data_is_refused(base, tmp_path):
    sft(base, "task", tmp_path / "r", TINY_RUN, stop_after=1, show_progress=False)
    with pytest.raises(LmlabError, match="different config.*lora_rank"):
        sft(base, "task", tmp_path / "r", TINY_RUN.replace(lora_rank=2), resume=True, show_progress=False)
    with pytest.raises(LmlabError, match="already holds a run"):
        sft(base, "task", tmp_path / "r", TINY_RUN, show_progress=False)


@pytest.mark.slow
def test_sft_with_lora_teaches_smollm2_the_answer_format(tmp_path):
    """End to end on the real SmolLM2-135M-Instruct: a few minutes of LoRA on the addition task
    raise the held-out task reward (it starts below 0: the model answers in prose)."""
    cfg = PostTrainConfig(loop=LoopConfig(max_steps=40, batch_size=8, eval_every=40, checkpoint_every=40,
                                          keep_checkpoints=2, log_every=1), block_size=64,
                          optim=PostTrainConfig.optim.replace(lr=2e-3), task_size=400, task_eval_size=32)
    result = sft(real_model("smollm2-135m-instruct"), "task", tmp_path / "r", cfg, show_progress=False)
    assert result.after["task_reward"] > result.before["task_reward"] + 0.3


def test_eval_task_grades_a_model_and_a_run_directory(base, tmp_path, capsys):
    sft(base, "task", tmp_path / "r", TINY_RUN.replace(peft="prefix", n_prefix=2), show_progress=False)
    for model in (base, tmp_path / "r"):  # a prefix-tuned run has no merged model: base + adapter
        assert lmlab("eval", "task", "--model", model, "--questions", "3", "--max-operand", "9", "--json") == 0
        result = json.loads(capsys.readouterr().out)
        assert result["questions"] == 3 and -0.5 <= result["reward"] <= 1 and 0 <= result["accuracy"] <= 1
    assert lmlab("eval", "task", "--model", base, "--reference", base, "--questions", "3", "--json") == 0
    assert json.loads(capsys.readouterr().out)["kl_to_reference"] == pytest.approx(0.0, abs=1e-5)  # itself
    assert lmlab("eval", "task", "--model", tmp_path / "r", "--reference", base, "--questions", "3", "--json") == 0
    assert json.loads(capsys.readouterr().out)["kl_to_reference"] > 0  # tuned: it moved
    assert lmlab("eval", "task", "--model", base, "--questions", "0") == 2
    one_line_error(capsys, "--questions 0 must be at least 1")
    assert lmlab("eval", "task", "--model", tmp_path / "r", "--dtype", "int8", "--questions", "3") == 2
    one_line_error(capsys, "holds an adapter without a merged model", "drop --dtype")

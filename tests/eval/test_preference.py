"""`lmlab eval preference`: the reward-model judge scores as `lmlab reward`'s own scoring does, the pairwise
judge's letter log-probabilities are transformers' own, both orders are asked, and the command reports, draws
and refuses bad input in one line."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from chat_models import TINY_RUN, tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.data.tasks import perfect_reply, task_prompts
from lmlab.eval.preference import (
    judge_chat,
    letter_ids,
    letter_logprobs,
    pairwise_judge,
    pairwise_verdict,
    reward_verdict,
)
from lmlab.models.load import load
from lmlab.recipes.reward import reward
from lmlab.tokenizers.chat import chat_prompt
from lmlab.training.post_train_config import TASK
from lmlab.training.rewards import reward_source

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = ["--questions", 6, "--max-operand", 9, "--max-new-tokens", 6, "--bootstrap", 200]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two tiny chat models (different seeds; a context long enough for the judge's prompt) and a reward run
    on the first."""
    root = tmp_path_factory.mktemp("preference")
    a, b = (tiny_chat_model(root / name, seed=seed, context_length=512) for name, seed in (("a", 0), ("b", 1)))
    reward(a, TASK, root / "rm", TINY_RUN.replace(loop=TINY_RUN.loop.replace(max_steps=2)), show_progress=False)
    return a, b, root / "rm"


def test_a_reward_verdict_needs_more_than_the_margin_and_a_split_pairwise_verdict_is_a_tie():
    assert [reward_verdict(1.0, 0.5, 0.0), reward_verdict(1.0, 0.5, 0.6), reward_verdict(0.2, 0.5, 0.1)] == [1, 0.5, 0]
    assert pairwise_verdict([-0.1, -2.0], [-3.0, -0.5]) == 1  # A's reply preferred in both orders
    assert pairwise_verdict([-2.0, -0.1], [-0.5, -3.0]) == 0  # B's in both
    assert pairwise_verdict([-0.1, -2.0], [-0.1, -2.0]) == 0.5  # the first position in both: position bias


@pytest.mark.parity
def test_the_reward_judge_scores_each_reply_as_lmlab_reward_does(models, capsys):
    a, b, rm = models
    assert lmlab("eval", "preference", "--model", a, "--reference", b, "--judge", rm, *SMALL, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    score = reward_source(TASK, None, rm, TINY_RUN.block_size)  # what PPO and sampled-pair DPO are graded by
    for row in result["prompts"]:
        assert row["score_a"] == pytest.approx(score(row["prompt"], row["reply_a"]), abs=1e-5)
        assert row["score_b"] == pytest.approx(score(row["prompt"], row["reply_b"]), abs=1e-5)
        assert row["verdict"] == reward_verdict(row["score_a"], row["score_b"], 0.0)
    assert result["n"] == 6 and result["wins"] + result["ties"] + result["losses"] == 6
    assert result["win_rate"] == pytest.approx(sum(r["verdict"] for r in result["prompts"]) / 6)
    assert result["interval"][0] <= result["win_rate"] <= result["interval"][1]


@pytest.mark.parity
def test_the_pairwise_judges_letter_logprobs_are_transformers_own(models):
    a, _, _ = models
    model, tokenizer = load(a)
    prompts = task_prompts(2, seed=3)
    chats = [judge_chat(prompts[0], "<answer>7</answer>", "7"), judge_chat(prompts[1], "12", "it is 12, I think")]
    ours = letter_logprobs(model.eval(), tokenizer, chats)  # (2, 2), one right-padded batch
    hf = AutoModelForCausalLM.from_pretrained(a).eval()
    for row, chat in enumerate(chats):
        ids = torch.tensor([tokenizer.encode(chat_prompt(tokenizer, chat))])
        with torch.no_grad():
            logprobs = torch.log_softmax(hf(ids).logits[0, -1].float(), dim=-1)
        assert ours[row].tolist() == pytest.approx(logprobs[list(letter_ids(tokenizer))].tolist(), abs=1e-5)


def test_the_pairwise_judge_asks_both_orders_so_swapping_the_models_swaps_the_verdicts(models):
    a, _, _ = models
    model, tokenizer = load(a)
    judge = pairwise_judge(model.eval(), tokenizer)
    prompts = task_prompts(4, seed=5)
    replies_a, replies_b = ["1", "<answer>3</answer>", "no idea", "5"], ["2", "3", "<answer>9</answer>", "5"]
    forward, swapped = judge(prompts, replies_a, replies_b), judge(prompts, replies_b, replies_a)
    assert [r["verdict"] for r in forward] == [1 - r["verdict"] for r in swapped]
    assert forward[3]["verdict"] == 0.5  # the same reply on both sides is a tie
    assert forward[0]["logprobs_ab"] == pytest.approx(swapped[0]["logprobs_ba"])


def test_cli_pairwise_judge_against_a_reply_file_prints_the_rates_and_draws_them(models, tmp_path, capsys):
    a, _, _ = models
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps({"prompt": p, "reply": f"<answer>{i}</answer>"}) + "\n"
                               for i, p in enumerate(task_prompts(5, seed=1000, max_operand=9))))
    png = tmp_path / "win.png"
    assert lmlab("eval", "preference", "--model", a, "--reference", replies, "--judge", a, "--judge-mode", "pairwise",
                 *SMALL, "--png", png) == 0
    out = capsys.readouterr().out
    assert "5 prompts" in out and "win rate" in out and "length-controlled win rate" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert lmlab("eval", "preference", "--model", a, "--reference", replies, "--judge", a, "--judge-mode", "pairwise",
                 "--data", TASK, *SMALL) == 2  # 6 task questions, 5 replies
    one_line_error(capsys, "--reference", "5 replies for 6 prompts")


@pytest.mark.parametrize("case, fragments", [
    ("judge is no reward run", ["--judge", "not a `lmlab reward` run", "--judge-mode pairwise"]),
    ("judge has no chat template", ["pairwise needs a chat model"]),
    ("prompts differ", ["line 1 is not prompt 1", "same prompts in order"]),
    ("negative tie margin", ["--tie-margin -1.0 must be 0 or more"]),
])
def test_bad_input_is_one_line_and_writes_nothing(models, decoder_dir, tmp_path, capsys, case, fragments):
    a, b, _ = models
    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps({"prompt": "What is 1 + 1?", "reply": "2"}) + "\n")
    args = {"judge is no reward run": ["--reference", b, "--judge", b],
            "judge has no chat template": ["--reference", b, "--judge", decoder_dir, "--judge-mode", "pairwise"],
            "prompts differ": ["--reference", replies, "--judge", a, "--judge-mode", "pairwise", "--data", TASK,
                       "--questions", 1],
            "negative tie margin": ["--reference", b, "--judge", a, "--tie-margin", -1]}[case]
    png = tmp_path / "win.png"
    assert lmlab("eval", "preference", "--model", a, *args, "--png", png, "--max-new-tokens", 4) == 2
    one_line_error(capsys, *fragments)
    assert not png.exists()


@pytest.mark.slow
@pytest.mark.parity
def test_smollm2_as_a_pairwise_judge_reads_the_letters_as_transformers_does():
    from gguf_reference import transformers_model
    from real_models import real_model

    path = real_model("smollm2-135m-instruct")
    model, tokenizer = load(path, "fp32")  # transformers runs the dequantized weights
    prompts = task_prompts(4, seed=9, max_operand=99)
    right = [perfect_reply(p) for p in prompts]
    wrong = ["<answer>0</answer>"] * len(prompts)
    chats = [judge_chat(p, a, b) for p, a, b in zip(prompts, right, wrong)]
    ours = letter_logprobs(model.eval(), tokenizer, chats)  # (4, 2)
    hf = transformers_model(path)
    for row, chat in enumerate(chats):
        with torch.no_grad():
            logits = hf(torch.tensor([tokenizer.encode(chat_prompt(tokenizer, chat))])).logits[0, -1]
        expected = torch.log_softmax(logits.float(), dim=-1)[list(letter_ids(tokenizer))]
        assert ours[row].tolist() == pytest.approx(expected.tolist(), abs=1e-3)
    judge = pairwise_judge(model, tokenizer)
    forward, swapped = judge(prompts, right, wrong), judge(prompts, wrong, right)
    assert [r["verdict"] for r in forward] == [1 - r["verdict"] for r in swapped]

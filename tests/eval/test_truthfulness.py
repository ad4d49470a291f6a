"""`lmlab eval truthfulness` against lm-eval's own truthfulqa_mc1 / truthfulqa_mc2 tasks (their YAMLs, prompt
and process_results, pointed at a JSONL of our own questions) run by lm-eval's `hf` model on the same tiny
random Llama: the same MC1 and MC2 for every question; then the JSONL forms, the chat prompt and the command."""

import json

import pytest

from chat_models import tiny_chat_model
from conftest import lmlab, one_line_error
from lm_eval_reference import lm_eval_samples, write_hf_llama
from lmlab.data.misconceptions import MISCONCEPTIONS
from lmlab.data.truthful_questions import embedded_questions, from_answers, read_truthful_questions
from lmlab.eval.harness import HarnessScorer
from lmlab.eval.truthfulness import QA_PRIMER, chat_context, evaluate_truthfulness, mc2_mass, qa_context
from lmlab.models.load import load
from real_models import models_root, real_model

pytestmark = pytest.mark.usefixtures("one_thread")
QUESTIONS = embedded_questions()[:4]


def truthfulqa_line(item) -> dict:
    return {"question": item.question,
            "mc1_targets": {"choices": list(item.mc1_choices), "labels": list(item.mc1_labels)},
            "mc2_targets": {"choices": list(item.mc2_choices), "labels": list(item.mc2_labels)}}


@pytest.mark.parity
def test_mc1_and_mc2_are_lm_evals_on_the_same_weights(tmp_path, monkeypatch):
    texts = [f"{q} {a}" for q, a in QA_PRIMER] + [a for m in MISCONCEPTIONS for a in (m.question, *m.true, *m.false)]
    directory = write_hf_llama(tmp_path / "llama", texts, window=1024)  # the QA primer fits
    samples = lm_eval_samples(monkeypatch, tmp_path, directory, {"ours_mc1": "truthfulqa/truthfulqa_mc1.yaml",
                                                                 "ours_mc2": "truthfulqa/truthfulqa_mc2.yaml"},
                              "validation", [truthfulqa_line(q) for q in QUESTIONS])
    theirs = {mc: [s["acc"] for s in samples[f"ours_{mc}"]] for mc in ("mc1", "mc2")}
    model, tokenizer = load(directory)
    ours = evaluate_truthfulness(HarnessScorer(model.eval(), tokenizer, 1024), QUESTIONS)["qa"]
    assert [r["mc1"] for r in ours["per_question"]] == theirs["mc1"]
    assert [r["mc2"] for r in ours["per_question"]] == pytest.approx(theirs["mc2"], abs=1e-4)
    assert 0 < sum(theirs["mc1"]) < len(QUESTIONS)  # the random model gets some right, some wrong


def test_the_simple_form_is_the_first_true_answer_against_the_false_ones(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "Q?", "true": ["a", "b"], "false": ["c", "d"]}\n\n')
    [item] = read_truthful_questions(path)
    assert item == from_answers("Q?", ("a", "b"), ("c", "d"))
    assert (item.mc1_choices, item.mc1_labels) == (("a", "c", "d"), (1, 0, 0))
    assert (item.mc2_choices, item.mc2_labels) == (("a", "b", "c", "d"), (1, 1, 0, 0))


def test_embedded_set_is_well_formed():
    assert 40 <= len(MISCONCEPTIONS) <= 60
    for m in MISCONCEPTIONS:
        assert 1 <= len(m.true) <= 2 and 2 <= len(m.false) <= 4 and m.question.endswith("?")
        assert not set(m.true) & set(m.false)


def test_mc2_is_the_normalised_mass_and_survives_underflow():
    assert mc2_mass([-1.0, -2.0, -3.0], [1, 0, 0]) == pytest.approx(1 / (1 + 2.718281828 ** -1 + 2.718281828 ** -2))
    assert mc2_mass([-2000.0, -2001.0], [0, 1]) == pytest.approx(1 / (1 + 2.718281828))  # exp() alone gives 0 / 0


def test_the_chat_prompt_puts_the_primer_in_turns_and_opens_the_reply(tmp_path):
    tiny_chat_model(tmp_path / "chat", context_length=256)
    model, tokenizer = load(tmp_path / "chat")
    context = chat_context(tokenizer, "Is it?")
    assert context.count("<|im_start|>user\n") == len(QA_PRIMER) + 1 and context.endswith("<|im_start|>assistant\n")
    assert qa_context("Is it?").endswith("Barcelona, Spain.\n\nQ: Is it?\nA:")
    result = evaluate_truthfulness(HarnessScorer(model.eval(), tokenizer, 256), QUESTIONS[:2], ("qa", "chat"))
    assert result["qa"]["per_question"][0]["logprobs"] != result["chat"]["per_question"][0]["logprobs"]


def test_cli_writes_json_and_a_png_for_both_prompts(tmp_path, capsys):
    tiny_chat_model(tmp_path / "chat", context_length=256)
    png = tmp_path / "t.png"
    assert lmlab("eval", "truthfulness", "--model", str(tmp_path / "chat"), "--limit", "3", "--prompt-format",
                 "both", "--json", "--png", str(png)) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["prompts"]) == {"qa", "chat"} and png.stat().st_size > 0
    for r in result["prompts"].values():
        assert r["questions"] == 3 and r["mc1_interval"][0] <= r["mc1"] <= r["mc1_interval"][1]


@pytest.mark.parametrize("line,fragment", [
    ('{"question": "Q?", "mc1_targets": {"choices": ["a", "b", "c"], "labels": [1, 1, 0]}, '
     '"mc2_targets": {"choices": ["a", "b"], "labels": [1, 0]}}', "exactly one choice 1"),
    ('{"question": "Q?", "true": ["a"]}', "'false' must be a non-empty list"),
    ('["Q?"]', "not an object"),
    ('{"question": "Q?", "true": ["a"], "false": ["b", "a"]}', "lists 'a' twice"),
])
def test_a_bad_line_is_one_error_and_nothing_is_written(tmp_path, capsys, line, fragment):
    data = tmp_path / "q.jsonl"
    data.write_text(line + "\n")
    png = tmp_path / "t.png"
    assert lmlab("eval", "truthfulness", "--model", "unused", "--data", str(data), "--png", str(png)) == 2
    one_line_error(capsys, f"{data}:1", fragment)
    assert not png.exists()


def test_chat_prompt_without_a_template_names_the_flag(decoder_dir, capsys):
    assert lmlab("eval", "truthfulness", "--model", str(decoder_dir), "--prompt-format", "chat") == 2
    one_line_error(capsys, "needs a chat template", "--prompt-format qa")


@pytest.mark.slow
def test_smollm2_gives_the_documented_scores_on_the_first_questions(monkeypatch, capsys):
    """docs/evaluation.md's run (its numbers are fp32's: int4 with fp32 activations gives them), on its first 8
    questions: the same MC1 per question, MC2 within 1e-3."""
    real_model("smollm2-135m-instruct")
    monkeypatch.setenv("LMLAB_CACHE", models_root())
    assert lmlab("eval", "truthfulness", "--model", "smollm2-135m-instruct", "--activations", "fp32", "--limit", "8",
                 "--prompt-format", "both", "--json") == 0
    result = json.loads(capsys.readouterr().out)["prompts"]
    documented = {"qa": [0.919, 0.988, 0.2893, 0.3118, 0.0, 0.0023, 0.0, 0.9993],
                  "chat": [0.8939, 0.9397, 0.2918, 0.0196, 0.0, 0.2186, 0.0, 1.0]}
    for prompt, mc2 in documented.items():
        assert [r["mc1"] for r in result[prompt]["per_question"]] == [1, 1, 0, 0, 0, 0, 0, 1]
        assert [r["mc2"] for r in result[prompt]["per_question"]] == pytest.approx(mc2, abs=1e-3)

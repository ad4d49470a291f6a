"""The embedded addition task (deterministic data, a reward that grades what it should) and preference files."""

import pytest

from lmlab.data.chat_jsonl import read_preference_jsonl
from lmlab.data.tasks import preference_pairs, ranked_answers, reward, score, task_examples, task_prompts
from lmlab.errors import LmlabError

PROMPT = [{"role": "system", "content": "Answer in the form <answer>N</answer>."},
          {"role": "user", "content": "What is 3 + 4?"}]


def test_data_is_deterministic_by_seed():
    assert task_examples(20, seed=1) == task_examples(20, seed=1)
    assert task_examples(20, seed=1) != task_examples(20, seed=2)
    assert preference_pairs(20, seed=1) == preference_pairs(20, seed=1)
    assert ranked_answers(20, 4, seed=1) == ranked_answers(20, 4, seed=1)
    assert task_prompts(5, seed=3) == [example[:2] for example in task_examples(5, seed=3)]


def test_examples_are_system_user_assistant_with_the_perfect_answer():
    for messages in task_examples(50, seed=0):
        assert [m["role"] for m in messages] == ["system", "user", "assistant"]
        assert reward(messages[:2], messages[2]["content"]) == 1.0


def test_max_operand_bounds_the_questions():
    answers = {messages[2]["content"] for messages in task_examples(200, seed=0, max_operand=2)}
    assert answers == {f"<answer>{total}</answer>" for total in range(5)}


def test_reward_grades_correctness_format_and_rambling():
    assert reward(PROMPT, "<answer>7</answer>") == 1.0
    assert reward(PROMPT, " <answer> 7 </answer>\n") == 1.0
    assert reward(PROMPT, "8") == 0.0
    assert reward(PROMPT, "I do not know") == 0.0
    assert reward(PROMPT, "<answer>8</answer>") == pytest.approx(0.2)  # right form only
    assert reward(PROMPT, "The answer is 7.") == pytest.approx(0.8)  # right number only
    assert reward(PROMPT, "3 + 4 = 7") == pytest.approx(0.8)
    rambling = "Well, adding three and four is something I can do: <answer>7</answer>"
    assert reward(PROMPT, rambling) == pytest.approx(0.8 - 0.5)


def test_reward_reads_the_question_from_text_or_messages():
    rendered = "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n"
    assert reward("What is 3 + 4?", "<answer>7</answer>") == reward(rendered, "<answer>7</answer>") == 1.0
    with pytest.raises(LmlabError, match="asks no 'a \\+ b' question"):
        reward("Hello", "<answer>7</answer>")


def test_preference_pairs_prefer_the_better_answer():
    for prompt, chosen, rejected in preference_pairs(200, seed=0):
        assert chosen != rejected
        assert reward(prompt, chosen) > reward(prompt, rejected)


def test_ranked_answers_are_best_first_with_distinct_rewards():
    for prompt, answers in ranked_answers(100, 5, seed=0):
        rewards = [reward(prompt, a) for a in answers]
        assert len(answers) == 5 and rewards == sorted(set(rewards), reverse=True)
    with pytest.raises(LmlabError, match="k=6"):
        ranked_answers(1, 6)


def test_score_reports_mean_reward_and_accuracy():
    replies = ["<answer>7</answer>", "7", "<answer>8</answer>", "6"]  # perfect, right number, right form, wrong
    result = score(lambda prompts: replies[:len(prompts)], [PROMPT] * 4)
    assert result.reward == pytest.approx((1.0 + 0.8 + 0.2 + 0.0) / 4)
    assert result.accuracy == 0.5
    with pytest.raises(LmlabError, match="one reply per prompt"):
        score(lambda prompts: [], [PROMPT])


# preference files

def test_read_preference_jsonl_turns_pairs_and_rankings_into_best_first_lists(tmp_path):
    path = tmp_path / "prefs.jsonl"
    path.write_text('{"prompt": "What is 3 + 4?", "chosen": "7", "rejected": "8"}\n\n'
                    '{"prompt": [{"role": "user", "content": "Hi"}], "ranked": ["Hello!", "Hi", "Go away"]}\n')
    assert read_preference_jsonl(path) == [
        ([{"role": "user", "content": "What is 3 + 4?"}], ["7", "8"]),
        ([{"role": "user", "content": "Hi"}], ["Hello!", "Hi", "Go away"]),
    ]


@pytest.mark.parametrize("text, message", [
    ('{"prompt": "p", "chosen": "a", "rejected": "b"}\n{"prompt": "p", "chosen": "a", "rejected": "a"}\n',
     "prefs.jsonl:2: answer 'a' appears twice"),
    ('{"prompt": "p", "ranked": ["a", "b", "a"]}\n', "prefs.jsonl:1: answer 'a' appears twice"),
    ('{"prompt": "p", "chosen": "a"}\n', "prefs.jsonl:1 needs 'prompt' with 'chosen' and 'rejected'"),
    ('{"prompt": "p", "ranked": ["a"]}\n', "prefs.jsonl:1: the answers must be at least two strings"),
    ('{"prompt": "p", "chosen": "a", "rejected": "b"\n', "prefs.jsonl:1 is not valid JSON"),
])
def test_bad_preference_files_name_the_line(tmp_path, text, message):
    path = tmp_path / "prefs.jsonl"
    path.write_text(text)
    with pytest.raises(LmlabError, match=message):
        read_preference_jsonl(path)

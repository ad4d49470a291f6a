"""TRL's dataset formats read as they are: SFT's `messages`, standard and conversational prompt/completion,
prompt-only; preferences standard, conversational (with and without a system turn) and with an implicit
prompt. What lmlab reads from each row, what its batches train on (the prompt masked, the reply trained),
and the same rows through TRL's own `maybe_extract_prompt` and `apply_chat_template`."""

import json

import pytest

from chat_models import TINY_RUN, tiny_chat_model
from lmlab.data.chat_jsonl import read_chat_jsonl, read_preference_jsonl
from lmlab.errors import LmlabError
from lmlab.models.load import load
from lmlab.objectives.sft import sft_batch
from lmlab.targets import IGNORE_INDEX
from lmlab.training.preference import pair_chats
from lmlab.training.preference_data import ranking_pairs
from lmlab.training.rewards import prompts_and_replies

SYSTEM = {"role": "system", "content": "Answer with a number."}
USER = {"role": "user", "content": "What is 3 + 4?"}
REPLY = {"role": "assistant", "content": "7"}
WRONG = {"role": "assistant", "content": "8"}
EARLIER = [{"role": "user", "content": "What is 1 + 1?"}, {"role": "assistant", "content": "2"}]  # a turn before
READ_NOT_TRAINED = [EARLIER[0], EARLIER[1] | {"train": False}]

SFT_ROWS = {  # TRL's SFT formats -> the chat lmlab trains on
    "messages": ({"messages": [SYSTEM, USER, REPLY]}, [SYSTEM, USER, REPLY]),
    "standard prompt-completion": ({"prompt": "What is 3 + 4?", "completion": "7"}, [USER, REPLY]),
    "conversational prompt-completion": ({"prompt": [USER], "completion": [REPLY]}, [USER, REPLY]),
    "conversational with a system turn": ({"prompt": [SYSTEM, USER], "completion": [REPLY]}, [SYSTEM, USER, REPLY]),
    "conversational with an earlier reply": ({"prompt": [*EARLIER, USER], "completion": [REPLY]},
                                             [*READ_NOT_TRAINED, USER, REPLY]),
    "prompt-only": ({"prompt": [SYSTEM, USER]}, [SYSTEM, USER]),
}
PREFERENCE_ROWS = {  # TRL's preference formats -> (prompt messages, [chosen, rejected])
    "standard": {"prompt": "What is 3 + 4?", "chosen": "7", "rejected": "8"},
    "conversational": {"prompt": [USER], "chosen": [REPLY], "rejected": [WRONG]},
    "conversational with a system turn": {"prompt": [SYSTEM, USER], "chosen": [REPLY], "rejected": [WRONG]},
    "implicit prompt": {"chosen": [SYSTEM, USER, REPLY], "rejected": [SYSTEM, USER, WRONG]},
    "implicit prompt after an earlier reply": {"chosen": [*EARLIER, USER, REPLY], "rejected": [*EARLIER, USER, WRONG]},
    "implicit prompt, a string prompt beside it": {"prompt": "What is 3 + 4?", "chosen": [USER, REPLY],
                                                   "rejected": [USER, WRONG]},
    "implicit standard prompt": {"chosen": "Q: 3 + 4? A: 7", "rejected": "Q: 3 + 4? A: 8"},
    "lmlab's messages with string answers": {"prompt": [SYSTEM, USER], "chosen": "7", "rejected": "8"},
}
EXPECTED_PREFERENCES = {
    "standard": ([USER], ["7", "8"]),
    "conversational": ([USER], ["7", "8"]),
    "conversational with a system turn": ([SYSTEM, USER], ["7", "8"]),
    "implicit prompt": ([SYSTEM, USER], ["7", "8"]),
    "implicit prompt after an earlier reply": ([*READ_NOT_TRAINED, USER], ["7", "8"]),
    "implicit prompt, a string prompt beside it": ([USER], ["7", "8"]),
    "implicit standard prompt": ([{"role": "user", "content": "Q: 3 + 4? A:"}], [" 7", " 8"]),
    "lmlab's messages with string answers": ([SYSTEM, USER], ["7", "8"]),
}
TRL_PREFERENCE_ROWS = [form for form in PREFERENCE_ROWS if not form.startswith("lmlab's")]


def write_rows(path, *rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load(tiny_chat_model(tmp_path_factory.mktemp("chat") / "m"))[1]


@pytest.mark.parametrize("form", list(SFT_ROWS))
def test_each_sft_format_reads_as_its_chat(tmp_path, form):
    row, chat = SFT_ROWS[form]
    assert read_chat_jsonl(write_rows(tmp_path / "chats.jsonl", row)) == [chat]


def test_prompt_only_rows_are_ppos_prompts(tmp_path):
    path = write_rows(tmp_path / "prompts.jsonl", {"prompt": "What is 3 + 4?"}, {"prompt": [SYSTEM, USER]},
                      {"prompt": [USER], "completion": [REPLY]})
    assert prompts_and_replies(str(path), TINY_RUN) == [([USER], None), ([SYSTEM, USER], None), ([USER], "7")]


@pytest.mark.parametrize("form", list(PREFERENCE_ROWS))
def test_each_preference_format_reads_as_its_prompt_and_answers(tmp_path, form):
    assert read_preference_jsonl(write_rows(tmp_path / "prefs.jsonl", PREFERENCE_ROWS[form])) == [
        EXPECTED_PREFERENCES[form]]


def trained_part(tokenizer, chat) -> tuple[str, str]:
    """(the text of the masked tokens, the text of the trained ones) of one chat in an SFT batch row."""
    inputs, targets = sft_batch(tokenizer, [chat], 64)
    ids, labels = [*inputs[0].tolist(), targets[0, -1].item()], [IGNORE_INDEX, *targets[0].tolist()]
    start = next(i for i, label in enumerate(labels) if label != IGNORE_INDEX)
    end = max(i for i, label in enumerate(labels) if label != IGNORE_INDEX) + 1
    assert labels[start:end] == ids[start:end]  # one trained span: the reply
    return (tokenizer.decode(ids[:start], skip_special_tokens=False),
            tokenizer.decode(ids[start:end], skip_special_tokens=False))


@pytest.mark.parametrize("form", ["standard prompt-completion", "conversational prompt-completion",
                                  "conversational with a system turn", "conversational with an earlier reply"])
def test_sft_batches_mask_the_prompt_and_train_the_completion(tmp_path, tokenizer, form):
    [chat] = read_chat_jsonl(write_rows(tmp_path / "chats.jsonl", SFT_ROWS[form][0]))
    prompt, reply = trained_part(tokenizer, chat)
    assert prompt.endswith("What is 3 + 4?<|im_end|>\n<|im_start|>assistant\n")
    assert reply == "7<|im_end|>\n"


@pytest.mark.parametrize("form", list(PREFERENCE_ROWS))
def test_preference_batches_train_each_answer_after_the_same_prompt(tmp_path, tokenizer, form):
    rankings = read_preference_jsonl(write_rows(tmp_path / "prefs.jsonl", PREFERENCE_ROWS[form]))
    chosen, rejected = (trained_part(tokenizer, chat) for chat in pair_chats(ranking_pairs(rankings[0])))
    assert chosen[0] == rejected[0] and chosen[0].endswith("<|im_start|>assistant\n")
    answers = EXPECTED_PREFERENCES[form][1]
    assert (chosen[1], rejected[1]) == (f"{answers[0]}<|im_end|>\n", f"{answers[1]}<|im_end|>\n")


BAD_ROWS = {
    "neither messages nor prompt": ({"text": "hi"}, "chats", ":1 has no 'messages' or 'prompt' field"),
    "mixed kinds": ({"prompt": "hi", "completion": [REPLY]}, "chats", "must both be strings (standard) or both lists"),
    "a user turn as completion": ({"prompt": [USER], "completion": [USER]}, "chats", "assistant messages only"),
    "a completion that is no message": ({"prompt": [USER], "completion": [{"text": "7"}]}, "chats",
                                        ":1: completion must be a non-empty list"),
    "no rejected": ({"chosen": [USER, REPLY]}, "prefs", ":1 needs 'prompt' with 'chosen' and 'rejected'"),
    "two turns after the prompt": ({"prompt": [USER], "chosen": [REPLY, USER], "rejected": [WRONG]}, "prefs",
                                   ":1: each answer in 'chosen' must be a string or one assistant message"),
    "nothing shared": ({"chosen": [USER, REPLY], "rejected": [SYSTEM, USER, WRONG]}, "prefs", "share no prompt"),
    "the same conversation": ({"chosen": [USER, REPLY], "rejected": [USER, REPLY]}, "prefs", "must differ"),
    "string and messages": ({"chosen": "7", "rejected": [USER, WRONG]}, "prefs", "must both be strings or both lists"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_a_bad_row_is_one_error_naming_the_file_and_line(tmp_path, case):
    row, kind, fragment = BAD_ROWS[case]
    path = write_rows(tmp_path / f"{kind}.jsonl", row)
    with pytest.raises(LmlabError, match=f"{kind}.jsonl") as error:
        (read_chat_jsonl if kind == "chats" else read_preference_jsonl)(path)
    assert fragment in str(error.value) and "\n" not in str(error.value)


class TestAgainstTRL:
    """The same rows through TRL's own helpers: the prompt TRL extracts is lmlab's, and where TRL renders a
    conversational row with the chat template, its prompt and completion texts are the tokens lmlab's batch
    masks and trains."""

    trl = pytest.importorskip("trl.data_utils")

    @pytest.fixture(scope="class")
    def hf_tokenizer(self, tmp_path_factory):
        transformers = pytest.importorskip("transformers")
        return transformers.AutoTokenizer.from_pretrained(tiny_chat_model(tmp_path_factory.mktemp("hf") / "m"))

    @pytest.mark.parametrize("form", TRL_PREFERENCE_ROWS)
    def test_the_prompt_is_the_one_trl_extracts(self, tmp_path, form):
        theirs = self.trl.maybe_extract_prompt(PREFERENCE_ROWS[form])
        as_text = [a if isinstance(a, str) else a[0]["content"] for a in (theirs["chosen"], theirs["rejected"])]
        prompt = theirs["prompt"]
        prompt = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        prompt = [m | {"train": False} if m["role"] == "assistant" else m for m in prompt]  # read, not trained
        assert read_preference_jsonl(write_rows(tmp_path / "p.jsonl", PREFERENCE_ROWS[form])) == [(prompt, as_text)]

    @pytest.mark.parametrize("form", ["conversational prompt-completion", "conversational with a system turn",
                                      "conversational with an earlier reply"])
    def test_sft_masks_trls_prompt_and_trains_trls_completion(self, tmp_path, tokenizer, hf_tokenizer, form):
        row = SFT_ROWS[form][0]
        theirs = self.trl.apply_chat_template(row, hf_tokenizer)
        [chat] = read_chat_jsonl(write_rows(tmp_path / "c.jsonl", row))
        assert trained_part(tokenizer, chat) == (theirs["prompt"], theirs["completion"])

    @pytest.mark.parametrize("form", ["conversational", "conversational with a system turn", "implicit prompt",
                                      "implicit prompt after an earlier reply"])
    def test_preference_batches_are_trls_prompt_chosen_and_rejected(self, tmp_path, tokenizer, hf_tokenizer, form):
        row = PREFERENCE_ROWS[form]
        theirs = self.trl.apply_chat_template(self.trl.maybe_extract_prompt(row), hf_tokenizer)
        rankings = read_preference_jsonl(write_rows(tmp_path / "p.jsonl", row))
        chosen, rejected = (trained_part(tokenizer, chat) for chat in pair_chats(ranking_pairs(rankings[0])))
        assert chosen == (theirs["prompt"], theirs["chosen"])
        assert rejected == (theirs["prompt"], theirs["rejected"])

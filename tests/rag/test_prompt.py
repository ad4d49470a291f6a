"""The open-book template: the last user message carries the numbered passages and their sources, then the
question; the model's own chat template renders the result; earlier turns are kept."""

import pytest

from chat_models import tiny_chat_model
from lmlab.errors import LmlabError
from lmlab.models.load import load
from lmlab.rag.passages import Passage
from lmlab.rag.prompt import augment_chat, open_book_text, with_passages
from lmlab.rag.retrieve import Hit
from lmlab.tokenizers.chat import chat_prompt

HITS = [Hit(Passage("Anna was born in Quenmere.", "anna.txt", 0), 4, 0.9),
        Hit(Passage("Bob keeps bees.", "bob.txt", 2), 7, 0.5)]


def test_the_open_book_text_is_the_documented_template():
    assert open_book_text("Where was Anna born?", HITS) == (
        "Answer the question using these passages.\n\n"
        "[1] (anna.txt) Anna was born in Quenmere.\n"
        "[2] (bob.txt) Bob keeps bees.\n\n"
        "Question: Where was Anna born?")
    assert open_book_text("Where was Anna born?", []) == "Where was Anna born?"  # closed book


def test_only_the_last_user_message_is_rewritten():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Where was Anna born?"}]
    rewritten = with_passages(messages, HITS)
    assert rewritten[:3] == messages[:3] and messages[3]["content"] == "Where was Anna born?"
    assert rewritten[3] == {"role": "user", "content": open_book_text("Where was Anna born?", HITS)}
    with pytest.raises(LmlabError, match="needs a user message"):
        with_passages([{"role": "system", "content": "x"}], HITS)


def test_the_chat_template_renders_the_passages_as_the_users_turn(tmp_path):
    _, tokenizer = load(tiny_chat_model(tmp_path / "chat"))
    text = chat_prompt(tokenizer, with_passages([{"role": "user", "content": "Where?"}], HITS))
    assert text == f"<|im_start|>user\n{open_book_text('Where?', HITS)}<|im_end|>\n<|im_start|>assistant\n"


def test_augment_chat_retrieves_for_the_last_user_message():
    class Recorder:
        def retrieve(self, queries, k):
            self.asked = (queries, k)
            return [HITS[:k]]
    recorder = Recorder()
    messages, hits = augment_chat(recorder, [{"role": "user", "content": "Old"}, {"role": "user", "content": "New"}], 1)
    assert recorder.asked == (["New"], 1) and hits == HITS[:1]
    assert messages[0]["content"] == "Old" and "[1] (anna.txt)" in messages[1]["content"]

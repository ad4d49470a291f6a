"""SFT: chats become tokens whose labels are exactly the assistant's replies; chat files read cleanly."""

import pytest
import torch

from lmlab.data.chat_jsonl import read_chat_jsonl
from lmlab.data.tasks import task_examples
from lmlab.errors import LmlabError
from lmlab.objectives.sft import chat_tokens, sft_batch
from lmlab.targets import IGNORE_INDEX
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 40 + 2?"},
        {"role": "assistant", "content": "42"}, {"role": "user", "content": "And 3 + 4?"},
        {"role": "assistant", "content": "It is 7."}]


@pytest.fixture(scope="module")
def chatml():
    texts = [m["content"] for chat in task_examples(50) for m in chat] + [m["content"] for m in CHAT]
    backend = train_bpe(texts, vocab_size=300)
    backend.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    im_end = backend.token_to_id("<|im_end|>")
    return TextTokenizer(backend, bos_id=0, eos_id=1, pad_id=2, stop_ids=(1, im_end), chat_template=CHATML)


def labelled_spans(tokenizer: TextTokenizer, ids: list[int], labels: list[int]) -> list[str]:
    """The text of each run of labelled tokens."""
    spans, run = [], []
    for token, label in zip(ids + [None], labels + [IGNORE_INDEX]):
        if label != IGNORE_INDEX:
            assert label == token
            run.append(token)
        elif run:
            spans.append(tokenizer.decode(run, skip_special_tokens=False))
            run = []
    return spans


def test_exactly_the_assistant_replies_and_their_end_tokens_are_labelled(chatml):
    ids, labels = chat_tokens(chatml, CHAT)
    assert len(ids) == len(labels)
    assert chatml.decode(ids, skip_special_tokens=False).startswith("<|im_start|>system\nBe brief.")
    assert labelled_spans(chatml, ids, labels) == ["42<|im_end|>\n", "It is 7.<|im_end|>\n"]


def test_an_assistant_turn_marked_not_to_train_is_read_but_not_labelled(chatml):
    marked = [*CHAT[:2], CHAT[2] | {"train": False}, *CHAT[3:]]
    ids, labels = chat_tokens(chatml, marked)
    assert ids == chat_tokens(chatml, CHAT)[0]
    assert labelled_spans(chatml, ids, labels) == ["It is 7.<|im_end|>\n"]


def test_templateless_tokenizers_label_the_fallback_layout():
    backend = train_bpe(["What is 3 + 4? <answer>7</answer>"], vocab_size=300)
    plain = TextTokenizer(backend, bos_id=0, eos_id=1, pad_id=2, stop_ids=(1,))
    chat = task_examples(1, seed=0)[0]
    ids, labels = chat_tokens(plain, chat)
    assert labelled_spans(plain, ids, labels) == [f" {chat[2]['content']}\n\n"]  # "Assistant: <answer>…"


def test_a_token_across_the_reply_boundary_counts_as_the_reply():
    template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" \
               "{% if add_generation_prompt %}assistant: {% endif %}"  # the prompt ends in a space
    backend = train_bpe(["assistant: <answer>7</answer>\n"] * 20, vocab_size=300)
    tokenizer = TextTokenizer(backend, bos_id=0, eos_id=1, pad_id=2, stop_ids=(1,), chat_template=template)
    chat = [{"role": "user", "content": "What is 3 + 4?"}, {"role": "assistant", "content": "<answer>7</answer>"}]
    prompt_ids = tokenizer.encode("user: What is 3 + 4?\nassistant: ")
    ids, labels = chat_tokens(tokenizer, chat)
    assert ids[: len(prompt_ids)] != prompt_ids  # " <" is one token in the chat, "assistant: " ends in " "
    assert labelled_spans(tokenizer, ids, labels) == [" <answer>7</answer>\n"]


def test_batch_targets_are_the_next_tokens_labels(chatml):
    ids, labels = chat_tokens(chatml, CHAT)
    inputs, targets = sft_batch(chatml, [CHAT, CHAT[:3]], block_size=len(ids) + 3)
    assert inputs.shape == targets.shape == (2, len(ids) + 3)
    assert inputs[0, : len(ids)].tolist() == ids and inputs[0, len(ids):].tolist() == [chatml.pad_id] * 3
    assert targets[0].tolist() == labels[1:] + [IGNORE_INDEX] * 4
    kept = targets[1][targets[1] != IGNORE_INDEX].tolist()
    assert chatml.decode(kept, skip_special_tokens=False) == "42<|im_end|>\n"


def test_long_chats_are_cut_to_the_block(chatml):
    ids, labels = chat_tokens(chatml, CHAT)
    inputs, targets = sft_batch(chatml, [CHAT], block_size=len(ids) - 3)
    assert inputs[0].tolist() == ids[: len(ids) - 3]
    assert targets[0].tolist() == labels[1 : len(ids) - 2]


def test_packing_puts_whole_chats_in_a_row_without_targets_across_them(chatml):
    chats = task_examples(3, seed=0)
    encoded = [chat_tokens(chatml, chat) for chat in chats]
    lengths = [len(ids) for ids, _ in encoded]
    inputs, targets = sft_batch(chatml, chats, block_size=lengths[0] + lengths[1], pack=True)
    assert inputs.shape[0] == 2  # chats 0 and 1 share a row, chat 2 starts the next
    assert inputs[0].tolist() == encoded[0][0] + encoded[1][0]
    assert targets[0, lengths[0] - 1] == IGNORE_INDEX  # chat 0's last token does not predict chat 1's first
    n_labelled = sum(sum(label != IGNORE_INDEX for label in labels) for _, labels in encoded)
    assert int((targets != IGNORE_INDEX).sum()) == n_labelled
    unpacked_inputs, _ = sft_batch(chatml, chats, block_size=lengths[0] + lengths[1])
    assert unpacked_inputs.shape[0] == 3


@pytest.mark.parametrize("bad, message", [
    ([{"role": "user", "content": "hi"}], "example 1 has no assistant message"),
    ([{"role": "robot", "content": "hi"}, {"role": "assistant", "content": "x"}],
     "example 1: message 0 has role 'robot'"),
    ([{"role": "user"}, {"role": "assistant", "content": "x"}], "example 1: message 0 needs 'role' and 'content'"),
    ([], "example 1: messages must be a non-empty list"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "train": "no"}],
     "example 1: message 1 has 'train' 'no'; use true or false"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "train": False}],
     "example 1 has no assistant message to train on"),
])
def test_bad_chats_name_the_example(chatml, bad, message):
    with pytest.raises(LmlabError, match=message):
        sft_batch(chatml, [CHAT, bad], block_size=64)


# chat files

def test_read_chat_jsonl_reads_messages_and_skips_blank_lines(tmp_path):
    path = tmp_path / "chats.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n\n')
    assert read_chat_jsonl(path) == [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]]


@pytest.mark.parametrize("text, message", [
    ('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": [oops]}\n', "chats.jsonl:2 is not valid JSON"),
    ('{"messages": [{"role": "user", "content": "hi"}]}\n{"text": "hi"}\n', "chats.jsonl:2 has no 'messages'"),
    ('[1, 2]\n', "chats.jsonl:1 is a JSON list, not an object"),
    ('{"messages": [{"role": "user"}]}\n', "chats.jsonl:1: messages must be"),
])
def test_bad_chat_files_name_the_line(tmp_path, text, message):
    path = tmp_path / "chats.jsonl"
    path.write_text(text)
    with pytest.raises(LmlabError, match=message):
        read_chat_jsonl(path)


def test_missing_chat_file_is_a_clear_error(tmp_path):
    with pytest.raises(LmlabError, match="does not exist"):
        read_chat_jsonl(tmp_path / "nope.jsonl")


def test_batches_are_long_tensors(chatml):
    inputs, targets = sft_batch(chatml, [CHAT], block_size=8)
    assert inputs.dtype == targets.dtype == torch.long

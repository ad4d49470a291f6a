"""`TextTokenizer` from a model directory: HF's named chat templates, and a broken tokenizer_config.json
or tokenizer.json as one line naming the file."""

import json

import pytest

from lmlab.data.markov import markov_corpus
from lmlab.errors import LmlabError
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.chat import chat_prompt
from lmlab.tokenizers.text import CONFIG_FILE, TextTokenizer
from lmlab.tokenizers.wordpiece import load_wordpiece
from tokenizers import Tokenizer

MESSAGES = [{"role": "user", "content": "hi"}]
NAMED = [{"name": "default", "template": "{% for m in messages %}[{{ m.content }}]{% endfor %}"},
         {"name": "tool_use", "template": "{% for m in messages %}<{{ m.content }}>{% endfor %}"}]


@pytest.fixture(scope="module")
def backend():
    return train_bpe(markov_corpus(50, seed=3)[0], 300)


@pytest.fixture
def directory(tmp_path, backend):
    """A tokenizer directory; write its tokenizer_config.json with `write_config`."""
    TextTokenizer(backend, 0, 1, 2, (1,)).save(tmp_path)
    return tmp_path


def write_config(directory, config) -> None:
    (directory / CONFIG_FILE).write_text(json.dumps(config))


def test_named_templates_use_the_default_and_pick_by_name(directory):
    write_config(directory, {"eos_token": "<|eos|>", "chat_template": NAMED})
    tokenizer = TextTokenizer.from_dir(directory)
    assert chat_prompt(tokenizer, MESSAGES) == "[hi]"
    assert chat_prompt(tokenizer.with_chat_template("tool_use"), MESSAGES) == "<hi>"
    assert tokenizer.with_chat_template(None) is tokenizer


def test_an_unknown_template_name_lists_the_names_there_are(directory):
    write_config(directory, {"chat_template": NAMED})
    with pytest.raises(LmlabError, match="--chat-template nope: .* it has default, tool_use"):
        TextTokenizer.from_dir(directory).with_chat_template("nope")


def test_a_template_name_for_a_model_with_one_unnamed_template_is_a_clear_error(directory):
    write_config(directory, {"chat_template": "{{ messages }}"})
    with pytest.raises(LmlabError, match="have no names .* drop --chat-template"):
        TextTokenizer.from_dir(directory).with_chat_template("default")


def test_named_templates_without_a_default_ask_for_a_name(directory):
    write_config(directory, {"chat_template": NAMED[1:]})
    tokenizer = TextTokenizer.from_dir(directory)
    with pytest.raises(LmlabError, match="none named 'default'; choose one with --chat-template"):
        chat_prompt(tokenizer, MESSAGES)
    assert chat_prompt(tokenizer.with_chat_template("tool_use"), MESSAGES) == "<hi>"


def test_saving_keeps_the_named_templates(directory, tmp_path_factory):
    write_config(directory, {"chat_template": NAMED})
    again = tmp_path_factory.mktemp("again")
    TextTokenizer.from_dir(directory).with_chat_template("tool_use").save(again)
    assert json.loads((again / CONFIG_FILE).read_text())["chat_template"] == NAMED
    assert chat_prompt(TextTokenizer.from_dir(again), MESSAGES) == "[hi]"


BROKEN_CONFIGS = {
    "not UTF-8": (b'{"eos_token": "\xff"}', "not UTF-8"),
    "not JSON": (b'{"eos_token": ', "not valid JSON"),
    "not an object": (b"[1, 2]", "must hold a JSON object"),
    "token of the wrong type": (b'{"eos_token": 5}', "eos_token must be a token"),
    "token content of the wrong type": (b'{"bos_token": {"content": [1]}}', "bos_token must be a token"),
    "stop tokens of the wrong type": (b'{"stop_tokens": "<|eos|>"}', "stop_tokens must be a list"),
    "template of the wrong type": (b'{"chat_template": 7}', "chat_template must be a template string or a list"),
    "named templates of the wrong shape": (b'{"chat_template": [{"name": "default"}]}', "chat_template must be"),
}


@pytest.mark.parametrize("content, problem", BROKEN_CONFIGS.values(), ids=BROKEN_CONFIGS.keys())
def test_a_broken_tokenizer_config_is_one_line_naming_the_file(directory, content, problem):
    (directory / CONFIG_FILE).write_bytes(content)
    with pytest.raises(LmlabError, match=problem) as error:
        TextTokenizer.from_dir(directory)
    assert CONFIG_FILE in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("content", [b"\xff\xfe{", b'{"model": ', b"[]", b'{"model": {"type": "BPE", "vocab": 5}}'])
def test_a_broken_tokenizer_json_is_one_line_naming_the_file(directory, content):
    (directory / "tokenizer.json").write_bytes(content)
    with pytest.raises(LmlabError, match=r"tokenizer.json'? (is not|must hold)") as error:
        TextTokenizer.from_dir(directory)
    assert "\n" not in str(error.value)


BERT_VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n"
BROKEN_BERT_FILES = {
    "config not UTF-8": ("tokenizer_config.json", b'{"do_lower_case": "\xff"}', "not UTF-8"),
    "config not an object": ("tokenizer_config.json", b"[1]", "must hold a JSON object"),
    "do_lower_case not a bool": ("tokenizer_config.json", b'{"do_lower_case": "no"}', "do_lower_case must be"),
    "vocab not UTF-8": ("vocab.txt", b"[UNK]\n\xff\xfe\n", "not a readable vocab.txt"),
}


@pytest.mark.parametrize("name, content, problem", BROKEN_BERT_FILES.values(), ids=BROKEN_BERT_FILES.keys())
def test_a_broken_bert_tokenizer_file_is_one_line_naming_it(tmp_path, name, content, problem):
    (tmp_path / "vocab.txt").write_text(BERT_VOCAB)
    (tmp_path / name).write_bytes(content)
    with pytest.raises(LmlabError, match=problem) as error:
        load_wordpiece(tmp_path, 16)
    assert name in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("key, value", [("eos_token", "<nope>"), ("bos_token", {"content": "<nope>"}),
                                        ("pad_token", "<nope>"), ("stop_tokens", ["<|eos|>", "<nope>"])])
def test_a_special_token_the_vocabulary_lacks_is_refused_naming_file_and_key(directory, key, value):
    write_config(directory, {"eos_token": "<|eos|>", key: value})
    with pytest.raises(LmlabError, match=f"{CONFIG_FILE}: {key} '<nope>' is not a token") as error:
        TextTokenizer.from_dir(directory)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("text, where", [("ba\ud800", "\\\\ud800 at character 3"),
                                         ("x\udcff", "\\\\udcff at character 2")])
def test_text_with_a_lone_surrogate_is_one_line(directory, text, where):
    with pytest.raises(LmlabError, match=f"lone surrogate \\({where}\\)"):
        TextTokenizer.from_dir(directory).encode(text)


def test_a_panic_inside_the_library_is_one_line(backend):
    """`\\s*\\s*$` on 5,000 spaces and an "x" passes Oniguruma's retry limit at the first position, which
    the library reports as a Rust panic. (Loading refuses that pattern; here the library builds it.)"""
    data = json.loads(backend.to_str())
    data["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "\\s*\\s*$"}, "behavior": "Isolated",
                             "invert": False}
    tokenizer = TextTokenizer(Tokenizer.from_str(json.dumps(data)))
    with pytest.raises(LmlabError, match="the tokenizers library failed while encoding a text .*retry-limit"):
        tokenizer.encode(" " * 5000 + "x")


def test_a_lone_surrogate_in_tokenizer_config_is_one_line_naming_the_file(directory):
    (directory / CONFIG_FILE).write_text('{"eos_token": "<|eos|>\\ud800"}')
    with pytest.raises(LmlabError, match=f"{CONFIG_FILE} holds a lone surrogate \\(\\\\ud800\\)"):
        TextTokenizer.from_dir(directory)

"""A tokenizer.json is bounded before the `tokenizers` library sees it: tokenizers laid out as the
published ones are (GPT-2, Llama-3, Qwen2, SmolLM2, BERT, SentencePiece conversions) still load and
work, and each kind of bomb is one line naming the file and the field, refused before any allocation."""

import json
import time

import pytest

import lmlab.tokenizers.file_checks as file_checks
from lmlab.data.markov import markov_corpus
from lmlab.errors import LmlabError
from lmlab.tokenizers.bpe import load_tokenizer, train_bpe
from lmlab.tokenizers.wordpiece import encode_batch, train_wordpiece
from published_tokenizers import BYTE_LEVEL, PUBLISHED, REAL_STYLE, TEXT
from tokenizers import Tokenizer


@pytest.fixture(scope="module")
def bpe_json():
    return json.loads(train_bpe(markov_corpus(50, seed=3)[0] + [TEXT], 400).to_str())


def write(tmp_path, data) -> str:
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    return str(tmp_path / "tokenizer.json")


def split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


@pytest.mark.parametrize("style", REAL_STYLE)
def test_real_style_tokenizers_load_and_work(tmp_path, bpe_json, style):
    tokenizer = load_tokenizer(write(tmp_path, bpe_json | REAL_STYLE[style]))
    ids = tokenizer.encode(TEXT, add_special_tokens=False).ids
    assert len(ids) > 5
    assert "world" in tokenizer.decode(ids)


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_split_patterns_load_and_split(tmp_path, bpe_json, name):
    pre_tokenizer = {"type": "Sequence", "pretokenizers": [split(PUBLISHED[name]), BYTE_LEVEL]}
    tokenizer = load_tokenizer(write(tmp_path, bpe_json | {"pre_tokenizer": pre_tokenizer}))
    assert tokenizer.decode(tokenizer.encode(TEXT, add_special_tokens=False).ids) == TEXT


def test_bert_tokenizer_loads_and_works(tmp_path):
    wordpiece = train_wordpiece(markov_corpus(50, seed=3)[0] + [TEXT], 200)
    tokenizer = load_tokenizer(write(tmp_path, json.loads(wordpiece.to_str())))
    assert tokenizer.encode("hello world").tokens[0] == "[CLS]"


def replace(content: str, pattern: dict | None = None) -> dict:
    return {"type": "Replace", "pattern": pattern or {"String": "a"}, "content": content}


def nested(depth: int) -> dict:
    node = {"type": "NFC"}
    for _ in range(depth):
        node = {"type": "Sequence", "normalizers": [node]}
    return node


BOMBS = {  # the edit -> what the one-line error must say
    "replace_content_1m": ({"normalizer": replace("x" * 1_000_000)}, "normalizer: .*characters, more than"),
    "replace_content_17": ({"normalizer": replace("x" * 17)}, "more than 16 times longer"),
    "replace_chain": ({"normalizer": {"type": "Sequence", "normalizers": [replace("xxx")] * 3}},
                      "more than 16 times longer"),
    "replace_regex_between_chars": ({"normalizer": replace("x" * 16, {"Regex": ""})}, "more than 16 times"),
    "decoder_replace": ({"decoder": replace("y" * 100)}, "decoder: .*more than 16 times longer"),
    "prepend_huge": ({"normalizer": {"type": "Prepend", "prepend": "▁" * 5000}}, "Prepend prepend of 5,000"),
    "split_alternation": ({"pre_tokenizer": split("(a|a)+$")}, "pre_tokenizer: Split regex .*repeats a group"),
    "split_nested": ({"pre_tokenizer": split("(a+)+$")}, "repeats a group"),
    "split_dot_star_group": ({"pre_tokenizer": split("(.*a){20}")}, "repeats a group"),
    "split_polynomial": ({"pre_tokenizer": split(r"\s*\s*\s*$")}, "3 parts without bound"),
    "split_in_sequence": ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [split("(a|b)*c"), BYTE_LEVEL]}},
                          "repeats a group"),
    "template_unknown_special": ({"post_processor": {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "<x>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
        "special_tokens": {}}}, "post_processor: TemplateProcessing places '<x>'"),
    "replace_regex_unsafe": ({"normalizer": replace("b", {"Regex": "(a*)*"})}, "Replace regex"),
    "nesting": ({"normalizer": nested(20)}, "nested more than 16"),
    "many_steps": ({"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}] * 2000}}, "2,000 entries"),
    "added_token_long": ({"added_tokens": [{"id": 400, "content": "z" * 5000, "single_word": False, "lstrip": False,
                                            "rstrip": False, "normalized": False, "special": True}]},
                         "5,000 characters long"),
    "added_token_id": ({"added_tokens": [{"id": 10**12, "content": "<z>", "single_word": False, "lstrip": False,
                                          "rstrip": False, "normalized": False, "special": True}]}, "has id"),
}


@pytest.mark.parametrize("bomb", BOMBS)
def test_bombs_are_one_line_naming_file_and_field_before_the_library_parses(tmp_path, bpe_json, bomb, monkeypatch):
    edit, message = BOMBS[bomb]
    monkeypatch.setattr("lmlab.tokenizers.bpe.Tokenizer.from_str", lambda text: pytest.fail("the library parsed it"))
    with pytest.raises(LmlabError, match=message) as error:
        load_tokenizer(write(tmp_path, bpe_json | edit))
    assert "tokenizer.json" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("field, limit", [("vocab", "MAX_VOCAB"), ("added_tokens", "MAX_ADDED_TOKENS")])
def test_tables_larger_than_the_bound_are_refused(tmp_path, bpe_json, monkeypatch, field, limit):
    monkeypatch.setattr(file_checks, limit, 3)  # the real bounds (2^22, 2^16) would take a large file
    with pytest.raises(LmlabError, match=f"{field} has .* entries, more than 3"):
        load_tokenizer(write(tmp_path, bpe_json))


def test_padding_and_truncation_the_file_sets_are_not_used(tmp_path, bpe_json):
    settings = {"padding": {"strategy": {"Fixed": 10**9}, "direction": "Right", "pad_to_multiple_of": None,
                            "pad_id": 0, "pad_type_id": 0, "pad_token": "<|pad|>"},
                "truncation": {"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 0}}
    tokenizer = load_tokenizer(write(tmp_path, bpe_json | settings))
    assert tokenizer.encode(TEXT).ids == load_tokenizer(write(tmp_path, bpe_json)).encode(TEXT).ids


def test_a_panic_while_encoding_for_an_encoder_is_one_line(tmp_path):
    """A template placing a special token it does not define panics inside the library on encoding
    (loading refuses such a file; here the library builds it)."""
    data = json.loads(train_wordpiece(markov_corpus(50, seed=3)[0], 200).to_str())
    data["post_processor"]["special_tokens"] = {}
    with pytest.raises(LmlabError, match="the tokenizers library failed while encoding texts"):
        encode_batch(Tokenizer.from_str(json.dumps(data)), ["hello world"])


ADVERSARIAL = {"spaces": " " * 20_000 + "x", "newlines": "\n" * 20_000 + "x", "letters": "a" * 20_000 + "!",
               "digits": "1" * 20_000 + "a", "punctuation": "!" * 20_000 + " ", "mixed": " \n" * 10_000 + "x"}


ORDINARY = (TEXT * (20_000 // len(TEXT) + 1))[:20_000]  # as long as each run, in words and spaces


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_patterns_stay_fast_on_long_runs(tmp_path, bpe_json, name):
    """What the safe class still lets through can be quadratic on a long run (`\\s+$`: 80 times as long
    as ordinary text of the same length, 3.4 s on 30,000 spaces); the published patterns are not: each
    kind of run of 20,000 characters splits within 10 times the time of ordinary text (about 1 time).
    A ratio, each side the best of three, so a slow or busy machine does not decide it."""
    pre_tokenizer = {"type": "Sequence", "pretokenizers": [split(PUBLISHED[name]), BYTE_LEVEL]}
    tokenizer = load_tokenizer(write(tmp_path, bpe_json | {"pre_tokenizer": pre_tokenizer}))

    def seconds(texts) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for text in texts:
                tokenizer.encode(text, add_special_tokens=False)
            best = min(best, time.perf_counter() - start)
        return best

    runs, ordinary = seconds(ADVERSARIAL.values()), seconds([ORDINARY] * len(ADVERSARIAL))
    assert runs < 10 * ordinary, f"{runs:.3f} s on long runs against {ordinary:.3f} s on ordinary text"

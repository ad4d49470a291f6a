import platform
import sys
import warnings

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import lmlab
from lmlab.errors import LmlabError
from lmlab.tokenizers import bpe
from lmlab.tokenizers.bpe import (
    MIN_VOCAB_SIZE,
    SPECIAL_TOKENS,
    load_tokenizer,
    save_tokenizer,
    special_token_ids,
    train_bpe,
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def train(model, data):\n    return model.fit(data)\n",
    "Pack my box with five dozen liquor jugs; naïve café déjà vu.",
] * 20
VOCAB_SIZE = 300


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(CORPUS, VOCAB_SIZE)


@settings(max_examples=200, deadline=None)
@given(text=st.text())
@example(text="emoji 😀👩‍👩‍👧 flags 🇫🇷")
@example(text="combining e\u0301 a\u0308\u0323 and zero-width\u200b joiner")
@example(text="nul \x00 tab \t newlines \n\r\n\n")
@example(text="  leading and trailing spaces  ")
@example(text="漢字かな交じり文 and Ελληνικά")
@example(text="text that spells <|eos|> and <|pad|>")
def test_decode_of_encode_is_identity_for_any_unicode(tokenizer, text):
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_vocab_size_is_respected_and_merges_are_learned(tokenizer):
    assert MIN_VOCAB_SIZE < tokenizer.get_vocab_size() <= VOCAB_SIZE


def test_special_tokens_have_ids_zero_to_three(tokenizer):
    assert special_token_ids(tokenizer) == {"bos": 0, "eos": 1, "pad": 2, "unk": 3}
    assert [tokenizer.id_to_token(i) for i in range(4)] == list(SPECIAL_TOKENS)


def test_encoding_adds_no_special_tokens(tokenizer):
    ids = tokenizer.encode("The quick brown fox").ids
    assert ids and not set(ids) & {0, 1, 2, 3}


def test_save_then_load_gives_the_same_tokenizer(tokenizer, tmp_path):
    path = save_tokenizer(tokenizer, tmp_path / "tok")
    assert path == tmp_path / "tok" / "tokenizer.json"
    for source in (path, path.parent):
        loaded = load_tokenizer(source)
        assert loaded.to_str() == tokenizer.to_str()
        assert loaded.encode(CORPUS[1]).ids == tokenizer.encode(CORPUS[1]).ids


def test_loading_returns_the_freed_parse_buffers_and_keeps_the_tokenizer_as_it_is(tokenizer, tmp_path, monkeypatch):
    """load_tokenizer trims the heap after parsing (`return_freed_memory`); the tokenizer is the one
    Tokenizer.from_file gives, encoding and decoding exactly as before."""
    from tokenizers import Tokenizer

    trims = []
    monkeypatch.setattr(bpe, "return_freed_memory", lambda: trims.append(1))
    path = save_tokenizer(tokenizer, tmp_path)
    loaded, plain = load_tokenizer(path), Tokenizer.from_file(str(path))
    assert trims == [1]
    assert loaded.to_str() == plain.to_str()
    for text in [*CORPUS[:3], "emoji 😀 and <|eos|> spelled out", ""]:
        ids = plain.encode(text).ids
        assert loaded.encode(text).ids == ids
        assert loaded.decode(ids, skip_special_tokens=False) == plain.decode(ids, skip_special_tokens=False)


def test_returning_freed_memory_uses_glibc_and_is_a_no_op_elsewhere(monkeypatch):
    bpe._malloc_trim.cache_clear()
    try:
        if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
            assert bpe._malloc_trim() is not None
        bpe.return_freed_memory()  # wherever the tests run: no error
        bpe._malloc_trim.cache_clear()
        monkeypatch.setattr(sys, "platform", "darwin")
        assert bpe._malloc_trim() is None
        bpe.return_freed_memory()
    finally:
        bpe._malloc_trim.cache_clear()


def test_third_party_tokenizer_without_our_specials_gives_none(tokenizer):
    from tokenizers import Tokenizer, models

    bare = Tokenizer(models.BPE())
    assert special_token_ids(bare) == {"bos": None, "eos": None, "pad": None, "unk": None}


def test_too_small_vocab_size_names_the_minimum():
    with pytest.raises(LmlabError, match=f"at least {MIN_VOCAB_SIZE}"):
        train_bpe(CORPUS, MIN_VOCAB_SIZE - 1)


def test_loading_a_missing_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(LmlabError, match="does not exist"):
        load_tokenizer(tmp_path / "nowhere")
    with pytest.raises(LmlabError, match="does not exist"):
        load_tokenizer(tmp_path)  # a directory without tokenizer.json


def test_loading_a_corrupt_tokenizer_is_a_clear_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(LmlabError, match="tokenizer.json is not valid JSON"):
        load_tokenizer(tmp_path)


def test_a_vocabulary_size_is_a_ceiling_the_library_fills_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a preset's size nobody asked for: falling short of it is not news
        small = train_bpe(CORPUS, 8000)
    assert small.get_vocab_size() < 8000


def test_cli_says_a_smaller_vocabulary_in_one_line_and_saves_it(tmp_path, capsys):
    data = tmp_path / "small.txt"
    data.write_text("the cat sat on the mat\nthe dog sat on the log\n")
    for kind in ("bpe", "wordpiece"):
        assert lmlab("tokenizer", "train", "--data", data, "--vocab-size", 8000, "--out", tmp_path / kind,
                     "--kind", kind) == 0
        size = load_tokenizer(tmp_path / kind).get_vocab_size()
        captured = capsys.readouterr()
        assert captured.err == (f"lmlab: warning: asked for a vocabulary of 8000 tokens, but the text gives only "
                                f"{size}; using {size} (more text would give more; or ask for {size} or fewer with "
                                "--vocab-size)\n")
        assert f"trained a {size}-token" in captured.out

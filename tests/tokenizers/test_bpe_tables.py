"""A byte-level BPE saved as its tables (what lmlab's GGUF caches keep) loads back as the same tokenizer: the
same ids and text for any input, the same added tokens at the same ids, the same special and stop tokens."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gguf_files import TEXTS, tiny_model, write_gguf
from lmlab.errors import LmlabError
from lmlab.models.llama.gguf_file import load_gguf
from lmlab.tokenizers.bpe import load_tokenizer, train_bpe
from lmlab.tokenizers.bpe_tables import BPE_MERGES, BPE_VOCAB, REST_FILE
from lmlab.tokenizers.gguf import CONTROL, NORMAL, USER_DEFINED, tokenizer_from_gguf
from lmlab.tokenizers.text import TextTokenizer

SAMPLES = [*TEXTS, "<|im_start|>user\nhéllo <|im_end|>\n", "  \n\n\t x 😀 ✓", "tokens<tag>glued", "x" * 300, ""]


def gguf_tokenizer(pre: str) -> TextTokenizer:
    """A GGUF vocabulary with control tokens, a user-defined token in the byte alphabet and one outside it
    (added after the vocabulary, at id 9), merges, and the pre-tokenizer `pre` names."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tag>", "✓-raw", "a", "b", "ab", "Ġ"]
    types = [CONTROL] * 3 + [USER_DEFINED] * 2 + [NORMAL] * 4
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": ["a b"],
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 0, "tokenizer.chat_template": "{{ x }}"}
    return tokenizer_from_gguf(meta)


def saved_and_loaded(tokenizer: TextTokenizer, directory) -> TextTokenizer:
    tokenizer.save(directory, tables=True)
    assert {p.name for p in directory.iterdir()} == {BPE_VOCAB, BPE_MERGES, REST_FILE, "tokenizer_config.json"}
    return TextTokenizer.from_dir(directory)


def assert_same(first: TextTokenizer, second: TextTokenizer, texts) -> None:
    assert first.backend.get_added_tokens_decoder() == second.backend.get_added_tokens_decoder()
    assert first.vocab_size == second.vocab_size and first.backend.get_vocab() == second.backend.get_vocab()
    fields = ("bos_id", "eos_id", "pad_id", "stop_ids", "chat_template")
    assert [getattr(second, f) for f in fields] == [getattr(first, f) for f in fields]
    for text in texts:
        ids = first.encode(text)
        assert second.encode(text) == ids, text
        assert second.decode(ids, skip_special_tokens=False) == first.decode(ids, skip_special_tokens=False)
        assert second.decode(ids) == first.decode(ids)


@pytest.mark.parametrize("pre", ["default", "llama-bpe"])
def test_a_gguf_vocabulary_comes_back_the_same(tmp_path, pre):
    original = gguf_tokenizer(pre)
    assert original.backend.token_to_id("✓-raw") == 9  # spelled outside the byte alphabet: appended
    assert_same(original, saved_and_loaded(original, tmp_path), SAMPLES + ["✓-raw<tag>ab"])


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("ab <>tagöx\n\t'sé1😀_|imstrend"), max_size=40))
def test_any_text_gets_the_same_ids_and_text_back(tmp_path_factory, text):
    directory = tmp_path_factory.mktemp("tables")
    original = gguf_tokenizer("default")
    assert_same(original, saved_and_loaded(original, directory), [text])


def test_a_trained_tokenizer_comes_back_the_same(tmp_path):
    trained = TextTokenizer(train_bpe(TEXTS * 20, vocab_size=300), bos_id=0, eos_id=1, pad_id=2, stop_ids=(1,))
    assert_same(trained, saved_and_loaded(trained, tmp_path), SAMPLES)


def test_the_gguf_cache_keeps_the_tables_and_loads_them(tmp_path, monkeypatch):
    monkeypatch.setenv("LMLAB_CACHE", str(tmp_path / "cache"))
    tokenizer = train_bpe(TEXTS * 20, vocab_size=300)
    path = write_gguf(tmp_path / "m.gguf", tiny_model(tokenizer.get_vocab_size()), tokenizer)
    for dtype in (torch.float32, "int8"):
        _, first = load_gguf(path, dtype)  # converted into the cache
        _, again = load_gguf(path, dtype)  # read from it
        assert_same(first, again, SAMPLES)
    cached = [p for p in (tmp_path / "cache" / "gguf").iterdir() if p.is_dir()]
    assert len(cached) == 2 and all((p / REST_FILE).is_file() and not (p / "tokenizer.json").exists() for p in cached)


def test_an_added_token_whose_id_moved_is_one_error(tmp_path):
    gguf_tokenizer("default").save(tmp_path, tables=True)
    rest = json.loads((tmp_path / REST_FILE).read_text())
    rest["added_tokens"][0]["id"] = 7
    (tmp_path / REST_FILE).write_text(json.dumps(rest))
    with pytest.raises(LmlabError, match=f"{REST_FILE}.*came back as id"):
        load_tokenizer(tmp_path)

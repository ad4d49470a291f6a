import json
import math

import numpy as np
import pytest
import torch

from lmlab.data import tokens as tokens_module
from lmlab.data.blocks import batch_starts, gather, split_blocks
from lmlab.data.markov import build_markov_source, markov_corpus
from lmlab.data.sources import read_texts
from lmlab.data.stdlib import stdlib_texts
from lmlab.data.tokens import tokenize_corpus
from lmlab.errors import LmlabError
from lmlab.tokenizers.bpe import train_bpe
from tokenizers import Tokenizer, models

# --- sources ---------------------------------------------------------------------------------


def test_a_text_file_is_one_document(tmp_path):
    (tmp_path / "a.txt").write_text("first paragraph\n\nsecond paragraph\n", encoding="utf-8")
    assert read_texts(tmp_path / "a.txt") == ["first paragraph\n\nsecond paragraph\n"]


def test_a_directory_gives_its_text_files_sorted_skipping_hidden_and_binary(tmp_path):
    (tmp_path / "b.md").write_text("bee", encoding="utf-8")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "z.py").write_text("zed", encoding="utf-8")
    (tmp_path / "a" / "NOTES").write_text("notes", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text('{"text": "see"}\n', encoding="utf-8")
    (tmp_path / ".hidden.txt").write_text("hidden", encoding="utf-8")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref", encoding="utf-8")
    (tmp_path / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    (tmp_path / "nul.txt").write_bytes(b"abc\x00def")
    (tmp_path / "blank.txt").write_text("  \n\t", encoding="utf-8")
    (tmp_path / "data.csv").write_text("x,y", encoding="utf-8")
    assert read_texts(tmp_path) == ["notes", "zed", "bee", "see"]


def test_a_jsonl_file_gives_one_document_per_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    lines = [json.dumps({"text": "one", "id": 1}), "", json.dumps({"text": "two\nlines"})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_texts(path) == ["one", "two\nlines"]


def test_a_missing_data_path_is_a_clear_error(tmp_path):
    with pytest.raises(LmlabError, match="does not exist; pass a text file"):
        read_texts(tmp_path / "missing")


def test_data_with_no_text_is_a_clear_error(tmp_path):
    with pytest.raises(LmlabError, match="holds no text"):
        read_texts(tmp_path)
    (tmp_path / "blank.txt").write_text(" \n ", encoding="utf-8")
    with pytest.raises(LmlabError, match="holds no text"):
        read_texts(tmp_path / "blank.txt")


@pytest.mark.parametrize(
    ("line", "problem"),
    [("{not json", "is not valid JSON"), ('{"title": "x"}', "has no string 'text' field")],
)
def test_a_bad_jsonl_line_is_named_by_number(tmp_path, line, problem):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "fine"}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(LmlabError, match=f"docs.jsonl:3 {problem}"):
        read_texts(path)


def test_a_named_file_that_is_not_utf8_is_a_clear_error(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(LmlabError, match="not UTF-8 text"):
        read_texts(tmp_path / "latin1.txt")


# --- stdlib ----------------------------------------------------------------------------------


def test_stdlib_texts_are_python_source_cut_at_the_byte_budget():
    texts = stdlib_texts(max_bytes=50_000)
    total = sum(len(text.encode("utf-8")) for text in texts)
    assert 50_000 - 4 < total <= 50_000  # the last file is cut at a whole character
    assert stdlib_texts(max_bytes=50_000) == texts
    assert any("def " in text or "import " in text for text in texts)


def test_stdlib_texts_rejects_a_non_positive_budget():
    with pytest.raises(LmlabError, match="max_bytes 0"):
        stdlib_texts(max_bytes=0)


# --- markov ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def source():
    return build_markov_source(n_words=120, seed=3)


def parse_symbols(text, words):
    """The source's states read back from a text, independently of the generator."""
    index = {word: i for i, word in enumerate(words)}
    end = len(words)
    states, n_sentences = [], 0
    for piece in text.split(" "):
        word = piece.rstrip(".")
        states.append(index[word.lower()])
        if piece.endswith("."):
            states.append(end)
            n_sentences += 1
    return states, n_sentences


def test_surprisal_equals_minus_log_probability_recomputed_from_the_text(source):
    for doc in source.generate(50, seed=7):
        states, n_sentences = parse_symbols(doc.text, source.words)
        assert 1 <= n_sentences <= source.max_sentences
        previous, expected = source.end, math.log(source.max_sentences)
        for state in states:
            expected -= math.log(source.transitions[previous, state])
            previous = state
        assert doc.surprisal_nats == pytest.approx(expected, rel=1e-9)


def test_entropy_rate_matches_mean_surprisal_per_word_of_a_long_sample(source):
    docs = source.generate(3000, seed=11)
    n_symbols = sum(len(parse_symbols(doc.text, source.words)[0]) for doc in docs)
    length_choices = len(docs) * math.log(source.max_sentences)
    chain_surprisal = sum(doc.surprisal_nats for doc in docs) - length_choices
    expected = source.entropy_rate_nats_per_word()
    assert chain_surprisal / n_symbols == pytest.approx(expected, rel=0.03)


def test_markov_source_and_samples_are_determined_by_their_seeds(source):
    again = build_markov_source(n_words=120, seed=3)
    assert again.words == source.words
    assert np.array_equal(again.transitions, source.transitions)
    assert np.allclose(source.transitions.sum(axis=1), 1.0)
    assert source.generate(20, seed=1) == source.generate(20, seed=1)
    assert source.generate(20, seed=1) != source.generate(20, seed=2)


def test_markov_text_is_sentences_of_single_spaced_words():
    texts, total = markov_corpus(n_docs=30, seed=5)
    assert len(texts) == 30 and total > 0
    for text in texts:
        assert text.endswith(".") and "  " not in text and text[0].isupper()
    assert markov_corpus(n_docs=30, seed=5) == (texts, total)


# --- tokens ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    texts, _ = markov_corpus(n_docs=100, seed=0)
    return train_bpe(texts, 400)


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LMLAB_CACHE", str(tmp_path / "cache"))


def test_tokenize_corpus_puts_eos_after_every_document(tokenizer, tmp_path):
    texts = ["Hello world.", "Second document here.", "Third."]
    tokens = tokenize_corpus(texts, tokenizer)
    expected = [i for text in texts for i in [*tokenizer.encode(text).ids, 1]]
    assert isinstance(tokens, np.memmap) and tokens.dtype == np.uint16
    assert tokens.tolist() == expected
    assert len(list((tmp_path / "cache" / "tokens").glob("*.npy"))) == 1


def test_tokenize_corpus_second_call_is_a_cache_hit(tokenizer, monkeypatch):
    texts, _ = markov_corpus(n_docs=20, seed=1)
    first = tokenize_corpus(texts, tokenizer)

    def no_encoding(*args):
        raise AssertionError("the cached corpus was tokenized again")

    monkeypatch.setattr(tokens_module, "_encode", no_encoding)
    assert np.array_equal(tokenize_corpus(texts, tokenizer), first)
    with pytest.raises(AssertionError, match="tokenized again"):
        tokenize_corpus([*texts[:-1], texts[-1] + " Changed."], tokenizer)


def test_special_token_text_in_a_document_is_not_a_boundary(tokenizer):
    tokens = tokenize_corpus(["a <|eos|> b"], tokenizer)
    assert tokens.tolist().count(1) == 1 and tokens[-1] == 1
    assert tokenizer.encode_special_tokens is False


def test_tokenize_corpus_needs_an_eos_id():
    bare = Tokenizer(models.BPE())
    bare.add_tokens(["a", "b"])
    with pytest.raises(LmlabError, match="pass eos_id="):
        tokenize_corpus(["ab"], bare)
    assert tokenize_corpus(["ab"], bare, eos_id=0).tolist() == [0, 1, 0]


# --- blocks ----------------------------------------------------------------------------------


def test_split_blocks_gives_disjoint_train_and_val_covering_every_block():
    tokens = np.arange(1001, dtype=np.uint16)
    split = split_blocks(tokens, block_size=10, val_fraction=0.1, seed=0)
    all_blocks = np.arange(100) * 10
    assert len(split.val_blocks) == 10
    assert not set(split.train_blocks) & set(split.val_blocks)
    both = np.concatenate([split.train_blocks, split.val_blocks])
    assert np.array_equal(np.sort(both), all_blocks)
    again = split_blocks(tokens, block_size=10, val_fraction=0.1, seed=0)
    assert np.array_equal(again.val_blocks, split.val_blocks)
    assert not np.array_equal(split_blocks(tokens, 10, 0.1, seed=1).val_blocks, split.val_blocks)


def test_split_blocks_holds_out_at_least_one_block():
    split = split_blocks(np.arange(21), block_size=10, val_fraction=0.01)
    assert len(split.train_blocks) == 1 and len(split.val_blocks) == 1


def test_a_corpus_too_short_for_two_blocks_is_a_clear_error():
    with pytest.raises(LmlabError, match="has 20 tokens but block size 10 needs at least 21"):
        split_blocks(np.arange(20), block_size=10)


def test_batches_visit_every_training_block_once_per_epoch():
    blocks = np.arange(10) * 7
    steps = [batch_starts(blocks, batch_size=3, step=step, seed=0) for step in range(10)]
    stream = np.concatenate(steps)  # 30 offsets = 3 epochs; batches straddle epoch boundaries
    epochs = stream.reshape(3, 10)
    for epoch in epochs:
        assert sorted(epoch) == sorted(blocks)
    assert not np.array_equal(epochs[0], epochs[1])


def test_resuming_at_a_step_gives_the_batches_of_the_uninterrupted_run():
    blocks = np.arange(37) * 16
    uninterrupted = [batch_starts(blocks, 8, step, seed=4) for step in range(20)]
    resumed = [batch_starts(blocks, 8, step, seed=4) for step in range(11, 20)]
    for a, b in zip(uninterrupted[11:], resumed):
        assert np.array_equal(a, b)
    assert not np.array_equal(batch_starts(blocks, 8, 0, seed=5), uninterrupted[0])


def test_gather_returns_windows_that_share_boundary_tokens():
    tokens = np.arange(100, dtype=np.uint16)
    batch = gather(tokens, np.array([0, 10, 50]), block_size=10)
    assert batch.dtype == torch.int64 and batch.shape == (3, 11)
    assert batch[0].tolist() == list(range(11))
    assert batch[0, -1] == batch[1, 0]


"""A corpus is cut into passages of whole sentences, at most --passage-words words, each starting with the
last sentences of the one before (up to --overlap words); corpora are text files, directories or JSON Lines."""

import json

import pytest

from lmlab.errors import LmlabError
from lmlab.rag.passages import read_corpus, split_corpus, split_document

TEXT = "One two three. Four five six seven. Eight nine. Ten eleven twelve thirteen fourteen."


def words(passage) -> list[str]:
    return passage.text.split()


def test_sentences_are_packed_up_to_the_word_limit_without_overlap():
    passages = split_document(TEXT, "doc", max_words=6, overlap=0)
    assert [p.text for p in passages] == ["One two three.", "Four five six seven. Eight nine.",
                                          "Ten eleven twelve thirteen fourteen."]
    assert [(p.source, p.position) for p in passages] == [("doc", 0), ("doc", 1), ("doc", 2)]


def test_each_passage_repeats_the_last_whole_sentences_of_the_one_before():
    passages = split_document("A b c. D e. F g h i. J k.", "doc", max_words=6, overlap=2)
    # "D e." (2 words) is carried over; "F g h i." (4 words) is more than the overlap, so "J k." starts afresh
    assert [p.text for p in passages] == ["A b c. D e.", "D e. F g h i.", "J k."]


def test_a_sentence_longer_than_a_passage_is_cut_by_words():
    passages = split_document(" ".join(f"w{i}" for i in range(25)) + ".", "doc", max_words=10, overlap=0)
    assert [len(words(p)) for p in passages] == [10, 10, 5]


def test_a_document_of_no_words_has_no_passages_and_bad_sizes_name_their_flag():
    assert split_document("  \n\n ", "doc") == []
    with pytest.raises(LmlabError, match="--overlap 5 must be in 0..4"):
        split_document(TEXT, "doc", max_words=5, overlap=5)
    with pytest.raises(LmlabError, match="--passage-words 0"):
        split_document(TEXT, "doc", max_words=0, overlap=0)


def test_a_directory_jsonl_and_a_text_file_are_corpora(tmp_path):
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "a.txt").write_text("Alpha beta.")
    (tmp_path / "docs" / "sub" / "b.md").write_text("Gamma delta.")
    (tmp_path / "docs" / "c.bin").write_bytes(b"\xff\x00")  # not a corpus file: skipped
    assert read_corpus(tmp_path / "docs") == [("a.txt", "Alpha beta."), ("sub/b.md", "Gamma delta.")]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"text": "Epsilon.", "source": "e"}) + "\n\n" + json.dumps({"text": "Zeta."}) + "\n")
    assert read_corpus(jsonl) == [("e", "Epsilon."), ("c.jsonl:3", "Zeta.")]
    passages = split_corpus(read_corpus(jsonl))
    assert [(p.source, p.text) for p in passages] == [("e", "Epsilon."), ("c.jsonl:3", "Zeta.")]


@pytest.mark.parametrize("name, content, message", [
    ("missing.txt", None, "does not exist"),
    ("empty.txt", "  \n", "holds no words"),
    ("bad.jsonl", '{"source": "x"}\n', 'c.jsonl:1|bad.jsonl:1 needs a string "text"'),
    ("list.jsonl", "[1]\n", "is a JSON list, not an object"),
])
def test_a_bad_corpus_is_one_line(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(LmlabError, match=message):
        read_corpus(path)

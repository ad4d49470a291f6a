"""`lmlab rag index`, `ask` and `eval` with a tiny encoder and a tiny chat model: the index is written
whole, a passage asked for itself comes back first, the model answers with the passages in its prompt,
the evaluation prints its table, --json and a PNG, and bad input is one line with nothing written."""

import json

import pytest

from chat_models import tiny_chat_model
from conftest import lmlab, one_line_error
from encoder_data import tiny_encoder_dir
from lmlab.rag.index import load_index
from png_files import read_png

pytestmark = pytest.mark.usefixtures("one_thread")
DOCS = {"cats.txt": "The cat sat on a mat. Bob sat on the mat.", "cities.txt": "Paris is in France. Rome is in Italy."}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return tiny_encoder_dir(root / "encoder"), tiny_chat_model(root / "chat", context_length=1024)


@pytest.fixture(scope="module")
def index(models, tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for name, text in DOCS.items():
        (root / "docs").mkdir(exist_ok=True)
        (root / "docs" / name).write_text(text)
    assert lmlab("rag", "index", "--data", root / "docs", "--out", root / "idx", "--encoder", models[0],
                 "--passage-words", "6", "--overlap", "0") == 0
    return root / "idx"


def test_index_writes_one_passage_per_sentence_here(index):
    loaded = load_index(index)
    assert [(p.source, p.position, p.text) for p in loaded.passages] == [
        ("cats.txt", 0, "The cat sat on a mat."), ("cats.txt", 1, "Bob sat on the mat."),
        ("cities.txt", 0, "Paris is in France."), ("cities.txt", 1, "Rome is in Italy.")]
    assert loaded.embeddings.shape == (4, 32) and loaded.max_words == 6


def test_ask_without_a_model_prints_the_passages_best_first(index, capsys):
    assert lmlab("rag", "ask", "--index", index, "--question", "Rome is in Italy.", "--top", "2", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["answer"] is None and len(result["sources"]) == 2
    assert result["sources"][0]["text"] == "Rome is in Italy." and result["sources"][0]["score"] == pytest.approx(1)


def test_ask_with_a_model_answers_with_the_passages_in_its_prompt(index, models, capsys):
    assert lmlab("rag", "ask", "--index", index, "--model", models[1], "--question", "Paris is in France.",
                 "--greedy", "--max-new-tokens", "4") == 0
    out, err = capsys.readouterr()
    assert "answering with 3 passages" in err
    assert "[1] 1.0000  cities.txt#0  Paris is in France." in out


def test_eval_prints_recall_and_closed_and_open_book_accuracy(models, tmp_path, capsys):
    assert lmlab("rag", "eval", "--model", models[1], "--encoder", models[0], "--people", "2", "--top", "1,2",
                 "--answer-top", "1", "--json", "--png", tmp_path / "rag.png") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["questions"] == 8 and set(result["recall"]) == {"1", "2"}
    assert list(result["accuracy"]) == ["closed", "open@1", "open@2"] and list(result["generated"]) == ["closed",
                                                                                                       "open@1"]
    assert all(0 <= v <= 1 for v in [*result["recall"].values(), *result["accuracy"].values()])
    assert result["chance"] == pytest.approx(0.5) and set(result["relations"]) == {"town", "year", "count", "pet"}
    assert len(result["answers"][0]["retrieved"]) == 2
    assert read_png(tmp_path / "rag.png").shape[2] == 3


def test_eval_prints_a_table_by_relation(models, capsys):
    assert lmlab("rag", "eval", "--model", models[1], "--encoder", models[0], "--people", "2", "--top", "1",
                 "--answer-top", "1") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("retrieval  recall@1 ") and lines[2].split() == ["ranked", "first", "closed", "open@1",
                                                                                 "chance"]
    assert [line.split()[0] for line in lines[3:8]] == ["town", "year", "count", "pet", "overall"]
    assert lines[8].startswith("answer in greedy reply  closed ")


@pytest.mark.parametrize("args, message", [
    (["index", "--data", "{tmp}/none", "--out", "{tmp}/idx"], "does not exist"),
    (["index", "--data", "{tmp}/none", "--out", "{tmp}/idx", "--overlap", "100"], "--overlap 100 must be in 0..99"),
    (["ask", "--index", "{tmp}", "--question", "q"], "is not an lmlab retrieval index"),
    (["ask", "--index", "{tmp}", "--question", "q", "--top", "0"], "--top 0 must be at least 1"),
    (["eval", "--model", "m", "--top", "1,x"], "--top '1,x' is not a comma-separated list"),
    (["eval", "--model", "m", "--answer-top", "4"], "--answer-top 4 must be one of --top"),
    (["eval", "--model", "m", "--people", "1"], "--people 1 must be in 2..1000"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, args, message):
    assert lmlab("rag", *[a.format(tmp=tmp_path) for a in args]) == 2
    one_line_error(capsys, message)
    assert not (tmp_path / "idx").exists()


def test_index_refuses_an_out_directory_it_did_not_write(models, tmp_path, capsys):
    (tmp_path / "c.txt").write_text("Some text.")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert lmlab("rag", "index", "--data", tmp_path / "c.txt", "--out", tmp_path / "mine", "--encoder", models[0]) == 2
    one_line_error(capsys, "--out")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"

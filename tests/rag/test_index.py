"""A retrieval index: built with a (tiny) sentence encoder, searched exactly as brute force does (and as
faiss's exact index does: the parity test), approximately by faiss's HNSW graph, saved as safetensors + JSON
and read back the same; a damaged index file is one line naming it."""

import json

import pytest
import torch
from safetensors.torch import save_file

from encoder_data import tiny_encoder_dir
from lmlab.errors import LmlabError
from lmlab.inference.embeddings import sentence_embeddings
from lmlab.models.load import load_encoder
from lmlab.rag import retrieve
from lmlab.rag.index import Index, build_index, load_index, save_index
from lmlab.rag.passages import Passage
from lmlab.rag.retrieve import Retriever, exact_top_k

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["the cat sat on a mat .", "paris is in france", "rome is in italy", "anna lives in oslo with bob",
         "which city is the capital", "the food was not very good", "a great movie", "bob sat on the mat"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return load_encoder(tiny_encoder_dir(tmp_path_factory.mktemp("encoder")))


@pytest.fixture(scope="module")
def index(encoder):
    passages = [Passage(t, f"doc{i // 2}", i % 2) for i, t in enumerate(TEXTS)]
    return build_index(encoder[0].eval(), encoder[1], passages, "tiny", 10, 2)


def unit(rows: int, dim: int, seed: int) -> torch.Tensor:
    vectors = torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed))
    return vectors / vectors.norm(dim=1, keepdim=True)


def test_exact_search_is_brute_force_across_blocks(monkeypatch):
    embeddings, queries = unit(1000, 16, 0), unit(7, 16, 1)
    expected = (queries @ embeddings.T).topk(5, dim=1)  # (7, 5)
    monkeypatch.setattr(retrieve, "EXACT_BLOCK", 64)  # 16 blocks, merged
    scores, rows = exact_top_k(embeddings, queries, 5)
    assert torch.equal(rows, expected.indices) and torch.allclose(scores, expected.values)
    assert exact_top_k(embeddings[:3], queries, 5)[1].shape == (7, 3)  # k past the index: all of it


@pytest.mark.parity
def test_exact_search_matches_faiss_exact_inner_product_index():
    faiss = pytest.importorskip("faiss")
    embeddings, queries = unit(2000, 32, 2), unit(10, 32, 3)
    reference = faiss.IndexFlatIP(32)
    reference.add(embeddings.numpy())
    ref_scores, ref_rows = reference.search(queries.numpy(), 8)
    scores, rows = exact_top_k(embeddings, queries, 8)
    assert rows.tolist() == ref_rows.tolist()
    assert torch.allclose(scores, torch.from_numpy(ref_scores), atol=1e-5)


def test_hnsw_search_finds_what_exact_search_finds(monkeypatch):
    pytest.importorskip("faiss")
    monkeypatch.setattr(retrieve, "HNSW_BATCH", 700)  # the graph is built in 5 batches
    embeddings, queries = unit(3000, 32, 4), unit(50, 32, 5)
    hnsw = retrieve.HnswSearch(embeddings)
    _, approximate = hnsw.top_k(queries, 10)
    _, exact = exact_top_k(embeddings, queries, 10)
    recall = sum(len(set(a) & set(e)) for a, e in zip(approximate.tolist(), exact.tolist())) / exact.numel()
    assert recall > 0.95


def test_auto_search_is_exact_below_the_threshold_and_hnsw_above(index, encoder, monkeypatch):
    assert Retriever(index, *encoder).search == "exact"
    pytest.importorskip("faiss")
    monkeypatch.setattr(retrieve, "ANN_THRESHOLD", 4)
    assert Retriever(index, *encoder).search == "hnsw"
    with pytest.raises(LmlabError, match="--search 'fast' is not one of auto, exact, hnsw"):
        Retriever(index, *encoder, search="fast")


def test_a_passage_asked_for_itself_comes_first(index, encoder):
    hits = Retriever(index, *encoder).retrieve(TEXTS[:3], 2)
    assert [row[0].passage.text for row in hits] == TEXTS[:3]
    assert all(abs(row[0].score - 1) < 1e-5 and len(row) == 2 for row in hits)
    assert hits[1][0].as_dict() == {"source": "doc0", "position": 1, "score": pytest.approx(1, abs=1e-5),
                                    "text": "paris is in france"}


def test_the_index_rows_are_the_sentence_embeddings(index, encoder):
    assert torch.allclose(index.embeddings, sentence_embeddings(encoder[0], encoder[1], TEXTS), atol=1e-6)


def test_save_and_load_give_the_same_index(index, tmp_path):
    save_index(index, tmp_path / "idx")
    loaded = load_index(tmp_path / "idx")
    assert loaded.passages == index.passages and torch.equal(loaded.embeddings, index.embeddings)
    assert (loaded.encoder, loaded.max_words, loaded.overlap) == ("tiny", 10, 2)
    assert (tmp_path / "idx" / ".lmlab").is_file()  # written whole, by lmlab: it may replace it
    save_index(index, tmp_path / "idx")


def damage(directory, what: str) -> None:
    meta = json.loads((directory / "index.json").read_text())
    if what == "format":
        meta["format"] = "faiss"
    elif what == "count":
        meta["passages"] = 9
    elif what == "dim":
        meta["dim"] = True
    elif what == "rows":
        save_file({"embeddings": torch.ones(8, 32)}, directory / "embeddings.safetensors")
    elif what == "dtype":
        save_file({"embeddings": torch.ones(8, 32, dtype=torch.float16)}, directory / "embeddings.safetensors")
    elif what == "truncated":
        data = (directory / "embeddings.safetensors").read_bytes()
        (directory / "embeddings.safetensors").write_bytes(data[:len(data) // 2])
    elif what == "passage":
        (directory / "passages.jsonl").write_text('{"text": 1}\n')
    elif what == "pickle":
        (directory / "embeddings.safetensors").write_bytes(b"\x80\x04\x95" + b"\x00" * 64)
    (directory / "index.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("what, message", [
    ("format", "says format 'faiss', not 'lmlab-rag-index-1'"),
    ("count", "holds F32 \\[8, 32\\], not F32 \\[9, 32\\]"),
    ("dim", '"dim" is True, not a whole number'),
    ("rows", "row 0 has length 5.65685, not 1"),
    ("dtype", "holds F16"),
    ("truncated", "corrupt or truncated"),
    ("passage", "passages.jsonl:1 is not a passage"),
    ("pickle", "corrupt or truncated"),
])
def test_a_damaged_index_is_one_line_naming_the_file(index, tmp_path, what, message):
    save_index(index, tmp_path / "idx")
    damage(tmp_path / "idx", what)
    with pytest.raises(LmlabError, match=message) as caught:
        load_index(tmp_path / "idx")
    assert "\n" not in str(caught.value) and "lmlab rag index" in str(caught.value)


def test_a_directory_that_is_not_an_index_is_one_line(tmp_path):
    with pytest.raises(LmlabError, match="is not an lmlab retrieval index"):
        load_index(tmp_path)


def test_an_encoder_of_another_width_is_refused(index, tmp_path):
    wider = Index(index.passages, torch.nn.functional.normalize(torch.ones(8, 16), dim=1), "x", 10, 2)
    with pytest.raises(LmlabError, match="32-dimensional embeddings, the index holds 16-dimensional"):
        Retriever(wider, *load_encoder(tiny_encoder_dir(tmp_path / "enc")))

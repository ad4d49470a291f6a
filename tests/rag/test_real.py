"""Retrieval with the real all-MiniLM-L6-v2 and SmolLM2-135M-Instruct: MiniLM finds the passage that holds
the answer to questions about invented people, faiss's HNSW graph finds what exact search finds on its
embeddings, and SmolLM2 answers from the retrieved passages what it cannot answer closed book.

Run with `pytest -m slow tests/rag/test_real.py`."""

import pytest

from lmlab.data.invented_facts import invented_facts
from lmlab.models.load import load, load_encoder
from lmlab.rag.evaluate import closed_vs_open, recall_at
from lmlab.rag.index import build_index
from lmlab.rag.passages import split_corpus
from lmlab.rag.retrieve import HnswSearch, Retriever, exact_top_k
from real_models import real_model

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def retriever():
    encoder, tokenizer = load_encoder(real_model("all-minilm-l6-v2"))
    documents, facts = invented_facts(12, seed=1)
    index = build_index(encoder.eval(), tokenizer, split_corpus(documents, 30, 0), "all-minilm-l6-v2", 30, 0)
    return Retriever(index, encoder, tokenizer), facts


def test_minilm_retrieves_the_passage_that_holds_the_answer(retriever):
    retriever, facts = retriever
    hits = retriever.retrieve([f.question for f in facts], 3)
    assert recall_at(hits, facts, 1) >= 0.9 and recall_at(hits, facts, 3) == 1.0


def test_hnsw_finds_what_exact_search_finds_on_minilm_embeddings(retriever):
    pytest.importorskip("faiss")
    retriever, facts = retriever
    embeddings = retriever.index.embeddings
    queries = embeddings[::3]  # passages as their own queries, and their neighbours
    assert HnswSearch(embeddings).top_k(queries, 5)[1].tolist() == exact_top_k(embeddings, queries, 5)[1].tolist()


def test_smollm2_answers_from_the_passages_what_it_cannot_closed_book(retriever):
    retriever, facts = retriever
    model, tokenizer = load(real_model("smollm2-135m-instruct"))
    result = closed_vs_open(model.eval(), tokenizer, retriever, facts[:12], ks=(1,), answer_k=1)
    assert result["accuracy"]["open@1"] >= result["accuracy"]["closed"] + 0.4
    assert result["generated"]["open@1"] > result["generated"]["closed"]

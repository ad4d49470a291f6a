"""Search an index: the top-k passages by cosine similarity to a query.

Embeddings are unit-length, so cosine similarity is a dot product. Below ANN_THRESHOLD passages the
search is exact: one matrix product in torch, in blocks of EXACT_BLOCK rows so memory stays bounded.
From ANN_THRESHOLD up it is approximate, by faiss's HNSW graph (a maintained library, `pip install
faiss-cpu`), built when the index is loaded; without faiss installed the search stays exact, which
is slower, never wrong. `search="exact"` or `"hnsw"` chooses either way.
"""

from dataclasses import dataclass

import torch

from lmlab.errors import LmlabError
from lmlab.inference.embeddings import sentence_embeddings
from lmlab.models.load import load_encoder
from lmlab.progress import in_batches
from lmlab.rag.choices import SEARCHES
from lmlab.rag.index import Index, load_index
from lmlab.rag.passages import Passage

ANN_THRESHOLD = 1_000_000  # passages: below, exact search takes under 0.2 s a query on one core (37 ms at 200,000)
EXACT_BLOCK = 65_536  # rows of the index multiplied at once
HNSW_NEIGHBOURS = 32  # faiss's M: links per node of the graph
HNSW_SEARCH_DEPTH = 512  # faiss's efSearch: candidates kept while searching (recall 0.93 against 0.64 at 128, random 20k)
HNSW_BATCH = 10_000  # rows added to the graph between two updates of its progress bar


@dataclass(frozen=True)
class Hit:
    """A retrieved passage, its row in the index and its cosine similarity to the query."""

    passage: Passage
    row: int
    score: float

    def as_dict(self) -> dict:
        return {"source": self.passage.source, "position": self.passage.position, "score": round(self.score, 6),
                "text": self.passage.text}


def exact_top_k(embeddings: torch.Tensor, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores, rows), each (Q, min(k, N)), best first: the exact top-k of `queries` (Q, dim) against
    `embeddings` (N, dim), both unit-length."""
    k = min(k, embeddings.shape[0])
    best_scores, best_rows = None, None
    for start in range(0, embeddings.shape[0], EXACT_BLOCK):
        scores = queries @ embeddings[start:start + EXACT_BLOCK].T  # (Q, block)
        top = scores.topk(min(k, scores.shape[1]), dim=1)
        rows = top.indices + start
        if best_scores is None:
            best_scores, best_rows = top.values, rows
        else:
            merged = torch.cat([best_scores, top.values], dim=1).topk(k, dim=1)  # (Q, k) of the 2k candidates
            best_scores, best_rows = merged.values, torch.cat([best_rows, rows], dim=1).gather(1, merged.indices)
    return best_scores, best_rows


class HnswSearch:
    """faiss's HNSW graph over the index's rows, by inner product (= cosine on unit vectors)."""

    def __init__(self, embeddings: torch.Tensor):
        try:
            import faiss
        except ImportError:
            raise LmlabError("approximate search needs faiss: pip install faiss-cpu (or use --search exact)") from None
        self.graph = faiss.IndexHNSWFlat(embeddings.shape[1], HNSW_NEIGHBOURS, faiss.METRIC_INNER_PRODUCT)
        self.graph.hnsw.efSearch = HNSW_SEARCH_DEPTH
        rows = list(range(embeddings.shape[0]))
        for batch in in_batches(rows, HNSW_BATCH, "hnsw graph", "passage", show=len(rows) > HNSW_BATCH):
            self.graph.add(embeddings[batch[0]:batch[-1] + 1].numpy())  # minutes for a large index: a bar with ETA

    def top_k(self, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        scores, rows = self.graph.search(queries.numpy(), k)  # (Q, k) each
        return torch.from_numpy(scores), torch.from_numpy(rows)


def choose_search(index: Index, search: str = "auto") -> str:
    """"exact" or "hnsw" for `search`: auto is hnsw from ANN_THRESHOLD passages up, if faiss is installed."""
    if search not in SEARCHES:
        raise LmlabError(f"--search {search!r} is not one of {', '.join(SEARCHES)}")
    if search != "auto":
        return search
    if len(index.passages) < ANN_THRESHOLD:
        return "exact"
    try:
        import faiss  # noqa: F401
    except ImportError:
        return "exact"
    return "hnsw"


class Retriever:
    """An index with its sentence encoder: queries in, the top-k passages out."""

    def __init__(self, index: Index, encoder, tokenizer, search: str = "auto"):
        if encoder.config.d_model != index.embeddings.shape[1]:
            raise LmlabError(f"the encoder gives {encoder.config.d_model}-dimensional embeddings, the index holds "
                             f"{index.embeddings.shape[1]}-dimensional ones; use the index's encoder ({index.encoder})")
        self.index = index
        self.encoder = encoder.eval()
        self.tokenizer = tokenizer
        self.search = choose_search(index, search)
        self.hnsw = HnswSearch(index.embeddings) if self.search == "hnsw" else None

    def retrieve(self, queries: list[str], k: int) -> list[list[Hit]]:
        """The top-k hits of each query, best first."""
        if k < 1:
            raise LmlabError(f"--top {k} must be at least 1")
        vectors = sentence_embeddings(self.encoder, self.tokenizer, queries).float().cpu()  # (Q, dim)
        if self.hnsw is not None:
            scores, rows = self.hnsw.top_k(vectors, min(k, len(self.index.passages)))
        else:
            scores, rows = exact_top_k(self.index.embeddings, vectors, k)
        return [[Hit(self.index.passages[r], r, s) for r, s in zip(rs, ss) if r >= 0]
                for rs, ss in zip(rows.tolist(), scores.tolist())]


def load_retriever(directory, encoder: str | None = None, search: str = "auto") -> Retriever:
    """The index in `directory` with its sentence encoder (the one that built it, or `encoder`)."""
    index = load_index(directory)
    model, tokenizer = load_encoder(encoder or index.encoder)
    return Retriever(index, model, tokenizer, search)

"""Retrieval search: exact cosine top-k in torch against faiss's HNSW graph, on unit vectors.

For each index size: the time of one query by `exact_top_k` (the default below 200,000 passages), the
time to build `HnswSearch` (paid at every load) and of one query through it, and the share of the exact
top 5 the graph finds. Random unit vectors are the worst case for a graph index (real sentence embeddings
cluster); both sides run on `--threads` threads.

  python benchmarks/rag_search.py                     # 20,000 passages of 384 dims
  python benchmarks/rag_search.py --passages 20000 200000
"""

import argparse
import json
import time

import torch

from lmlab.rag.retrieve import HnswSearch, exact_top_k


def unit_vectors(rows: int, dim: int, seed: int) -> torch.Tensor:
    vectors = torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed))
    return vectors / vectors.norm(dim=1, keepdim=True)


def measure(passages: int, dim: int, queries: int) -> dict:
    """Exact and HNSW search times and the graph's recall@5 for one index size."""
    embeddings, asked = unit_vectors(passages, dim, 0), unit_vectors(queries, dim, 1)
    started = time.perf_counter()
    for i in range(queries):
        exact_top_k(embeddings, asked[i:i + 1], 5)
    exact = (time.perf_counter() - started) / queries
    started = time.perf_counter()
    graph = HnswSearch(embeddings)
    build = time.perf_counter() - started
    started = time.perf_counter()
    for i in range(queries):
        graph.top_k(asked[i:i + 1], 5)
    approximate = (time.perf_counter() - started) / queries
    found = sum(len(set(a) & set(e)) for a, e in zip(graph.top_k(asked, 5)[1].tolist(),
                                                     exact_top_k(embeddings, asked, 5)[1].tolist()))
    return {"passages": passages, "dim": dim, "exact_ms": round(exact * 1000, 2), "hnsw_build_s": round(build, 1),
            "hnsw_ms": round(approximate * 1000, 2), "hnsw_recall_at_5": round(found / (5 * queries), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, nargs="+", default=[20_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import faiss
    faiss.omp_set_num_threads(args.threads)
    for passages in args.passages:
        print(json.dumps(measure(passages, args.dim, args.queries)), flush=True)


if __name__ == "__main__":
    main()

"""The choices the `lmlab rag` commands list (how an index is searched, how many passages a prompt takes), in
a module without torch, so that their parsers load at once."""

SEARCHES = ("auto", "exact", "hnsw")  # exact cosine top-k, faiss HNSW, or HNSW only for large indexes
KS = (1, 3, 5)  # passages in the prompt, and the k of recall@k

"""Retrieval-augmented generation: a corpus split into passages, embedded by a sentence encoder into an
index on disk, searched by cosine top-k, and the passages put into a chat model's prompt.

    from lmlab.rag import build_index, load_retriever, augment_chat
    retriever = load_retriever("notes.index")                      # written by `lmlab rag index`
    hits = retriever.retrieve(["Where was Anna born?"], 3)[0]      # [Hit(passage, row, score), …]
    messages, hits = augment_chat(retriever, [{"role": "user", "content": "Where was Anna born?"}], 3)

Inside: `passages` (corpus -> passages), `index` (embeddings on disk, checked when read), `retrieve`
(exact search in torch, faiss HNSW for large indexes), `prompt` (the open-book template), `evaluate`
(closed book against open book, recall@k).
"""

from lmlab.lazy import lazy_exports

# name -> the module it lives in: imported on first use, so that `lmlab.rag.passages` and `lmlab.rag.choices`
# (what the CLI's parsers read) load without torch
_EXPORTS = {
    **dict.fromkeys(("Index", "build_index", "load_index", "save_index"), "lmlab.rag.index"),
    **dict.fromkeys(("Passage", "read_corpus", "split_corpus", "split_document"), "lmlab.rag.passages"),
    **dict.fromkeys(("augment_chat", "open_book_text", "with_passages"), "lmlab.rag.prompt"),
    **dict.fromkeys(("Hit", "Retriever", "exact_top_k", "load_retriever"), "lmlab.rag.retrieve"),
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

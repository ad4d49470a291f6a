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

from lmlab.rag.index import Index, build_index, load_index, save_index
from lmlab.rag.passages import Passage, read_corpus, split_corpus, split_document
from lmlab.rag.prompt import augment_chat, open_book_text, with_passages
from lmlab.rag.retrieve import Hit, Retriever, exact_top_k, load_retriever

__all__ = ["Hit", "Index", "Passage", "Retriever", "augment_chat", "build_index", "exact_top_k", "load_index",
           "load_retriever", "open_book_text", "read_corpus", "save_index", "split_corpus", "split_document",
           "with_passages"]

"""Tokenize a corpus once and keep the result: a flat array of token ids, memory-mapped from cache.

Documents are encoded without special tokens and an eos id is appended after each one, so the
model learns where documents end. The array is stored as `.npy` under `cache_dir("tokens")`, named
by a hash of the tokenizer and every text; the same corpus with the same tokenizer is a cache hit
and costs one pass of hashing, never a second tokenization.
"""

import hashlib
from collections.abc import Sequence

import numpy as np
from tqdm import tqdm

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.cache import cache_dir
from lmlab.tokenizers.bpe import EOS, special_token_ids
from lmlab.tokenizers.panics import library_panics
from tokenizers import Tokenizer

CACHE_FORMAT = b"lmlab-tokens-v1"  # change when the array's layout or meaning changes
DOCS_PER_BATCH = 1024
PROGRESS_MIN_DOCS = 10 * DOCS_PER_BATCH  # smaller corpora tokenize in a blink; no bar


def tokenize_corpus(
    texts: Sequence[str], tokenizer: Tokenizer, eos_id: int | None = None
) -> np.memmap:
    """All `texts` as one read-only token array (uint16 when ids fit, else uint32), eos after each.

    `eos_id` defaults to the tokenizer's `<|eos|>`; pass it for tokenizers that name theirs
    differently. Text that spells a special token (say "<|eos|>") is encoded as plain text, so
    document boundaries come only from the eos ids added here.
    """
    if not texts:
        raise LmlabError("no documents to tokenize; pass at least one text")
    if eos_id is None:
        eos_id = special_token_ids(tokenizer)["eos"]
        if eos_id is None:
            raise LmlabError(
                f"tokenizer has no '{EOS}' token; pass eos_id= with its end-of-text id"
            )
    if not 0 <= eos_id < tokenizer.get_vocab_size():
        raise LmlabError(
            f"eos_id {eos_id} is outside the tokenizer's vocabulary of "
            f"{tokenizer.get_vocab_size()} ids; pass an id below that"
        )
    path = cache_dir("tokens") / f"{_corpus_key(texts, tokenizer, eos_id)}.npy"
    if not path.exists():
        tokens = _encode(texts, tokenizer, eos_id)  # (n_tokens,)
        with atomic_path(path) as tmp, open(tmp, "wb") as file:
            np.save(file, tokens)
    return np.load(path, mmap_mode="r")


def _corpus_key(texts: Sequence[str], tokenizer: Tokenizer, eos_id: int) -> str:
    """A sha256 naming this exact tokenizer, eos id and sequence of texts."""
    digest = hashlib.sha256(CACHE_FORMAT)
    for part in (tokenizer.to_str(), str(eos_id), *texts):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))  # length prefix: no two corpora collide
        digest.update(data)
    return digest.hexdigest()


def _encode(texts: Sequence[str], tokenizer: Tokenizer, eos_id: int) -> np.ndarray:
    """Encode `texts` in batches and join them into one flat array with eos after every document."""
    dtype = np.uint16 if tokenizer.get_vocab_size() <= 2**16 else np.uint32
    pieces = []
    progress = tqdm(
        total=len(texts), desc="tokenizing", unit="doc", disable=len(texts) < PROGRESS_MIN_DOCS
    )
    spell_out = tokenizer.encode_special_tokens
    tokenizer.encode_special_tokens = True  # special-token text in a document stays text
    try:
        for begin in range(0, len(texts), DOCS_PER_BATCH):
            batch = list(texts[begin : begin + DOCS_PER_BATCH])
            ids = []
            with library_panics("encoding the data"):
                encodings = tokenizer.encode_batch(batch, add_special_tokens=False)
            for encoding in encodings:
                ids += encoding.ids
                ids.append(eos_id)
            pieces.append(np.array(ids, dtype=dtype))
            progress.update(len(batch))
    finally:
        tokenizer.encode_special_tokens = spell_out
        progress.close()
    return np.concatenate(pieces)  # (n_tokens,)

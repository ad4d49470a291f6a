"""Sentence embeddings from a BERT encoder, fast: length-sorted batches under inference mode.

An embedding is the mean of the encoder's last hidden states over a sentence's real tokens,
L2-normalised (Sentence-BERT's pooling, what all-MiniLM-L6-v2 is trained for). Sentences are
encoded in batches of similar length, so little work goes into padding; padded positions are
masked out of attention and of the mean, so a sentence gets the same embedding in any batch.
"""

import torch

from lmlab.models.bert.model import BertEncoder
from lmlab.modules.pooling import mean_pooled_embedding
from lmlab.progress import in_batches
from lmlab.tokenizers.wordpiece import encodings_to_tensors
from tokenizers import Tokenizer


@torch.inference_mode()
def sentence_embeddings(encoder: BertEncoder, tokenizer: Tokenizer, texts: list[str], batch_size: int = 32,
                        show_progress: bool = False) -> torch.Tensor:
    """(N, d_model) unit-length embeddings of `texts`, in their order (`show_progress`: a bar on stderr).
    `tokenizer` pads on the right, as `load_wordpiece` sets it up (BERT's absolute positions count from
    the first token)."""
    encodings = tokenizer.encode_batch(texts)  # tokenized once, right-padded to the longest text
    lengths = [sum(e.attention_mask) for e in encodings]  # real tokens, padding aside
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    device = next(encoder.parameters()).device
    out = torch.empty(len(texts), encoder.config.d_model, device=device)
    for indices in in_batches(order, batch_size, "embedding", "sentence", show_progress):
        longest = max(lengths[i] for i in indices)
        ids, mask, types = (t.to(device) for t in encodings_to_tensors([encodings[i] for i in indices], longest))
        out[indices] = mean_pooled_embedding(encoder(ids, mask, types), mask)
    return out

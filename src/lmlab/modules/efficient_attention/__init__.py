"""Attention in less than O(T^2): drop-in cores for `SelfAttention`, one per method of the efficient
transformers, chosen by a model's `attention` setting.

A core maps q (B, H, T, D), k, v (B, H, S, D) and an optional key padding (B, S) to (B, H, T, D); the layer
around it (projections, rotary positions, KV cache, output) is `SelfAttention`'s, so a model swaps methods by
one setting and keeps its weights' names. "full" is no core: `attend`, i.e. torch's SDPA.
"""

from torch import nn

from lmlab.config_checks import check_causal_attention
from lmlab.modules.efficient_attention.linformer import LinformerAttention
from lmlab.modules.efficient_attention.lsh import LSHAttention
from lmlab.modules.efficient_attention.nystrom import NystromAttention
from lmlab.modules.efficient_attention.performer import PerformerAttention
from lmlab.modules.efficient_attention.sparse import SparseAttention

METHODS = ("full", "window", "bigbird", "lsh", "performer", "linformer", "nystrom")


def attention_core(cfg, causal: bool, layer: int = 0) -> nn.Module | None:
    """The core for `cfg.attention` (a ModelConfig or EncoderConfig: its attention_* settings), or None for
    full attention. `layer` seeds the random parts (BigBird's blocks, LSH's rotations, Performer's
    features), so layers draw independently and a rebuilt model draws the same."""
    method = cfg.attention
    if causal:
        check_causal_attention(method)
    head_dim = cfg.d_model // cfg.n_heads
    if method == "full":
        return None
    if method in ("window", "bigbird"):
        return SparseAttention(causal, cfg.attention_window, cfg.attention_globals,
                               cfg.attention_random if method == "bigbird" else 0, cfg.attention_window, seed=layer)
    if method == "lsh":
        return LSHAttention(causal, head_dim, cfg.attention_window, cfg.attention_hashes, seed=layer)
    if method == "performer":
        return PerformerAttention(causal, head_dim, cfg.attention_rank, seed=layer)
    if method == "linformer":
        return LinformerAttention(cfg.context_length, cfg.attention_rank)
    return NystromAttention(cfg.attention_rank)

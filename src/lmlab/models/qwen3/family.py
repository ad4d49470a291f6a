"""Qwen3's record in the registry: Llama with per-head q/k RMSNorms."""

from lmlab.config import ModelConfig, llama_like
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.qwen3 import convert, gguf

PRESETS = {
    "qwen3-tiny": llama_like("qwen3", vocab_size=4096, context_length=256, n_layers=4, n_heads=4, n_kv_heads=2,
                             d_model=128, d_ff=352, qk_norm="head", head_size=48, rope_base=1e6, norm_eps=1e-6),
    "qwen3-0.6b": llama_like("qwen3", vocab_size=151936, context_length=40960, n_layers=28, n_heads=16,
                             n_kv_heads=8, d_model=1024, d_ff=3072, qk_norm="head", head_size=128, rope_base=1e6,
                             norm_eps=1e-6, tie_embeddings=True),
}


FAMILY = Family("qwen3", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert, gguf=gguf,
                objective="causal_lm", presets=PRESETS)

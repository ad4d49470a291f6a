"""Phi-3's record in the registry: Llama with fused qkv and gate/up projections and a sliding window."""

from lmlab.config import ModelConfig, llama_like
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.phi3 import convert, gguf

PRESETS = {
    "phi3-tiny": llama_like("phi3", vocab_size=4096, context_length=256, n_layers=4, n_heads=4, n_kv_heads=2,
                            d_model=128, d_ff=352, sliding_window=64, tie_embeddings=False),
    "phi-3-mini-4k": llama_like("phi3", vocab_size=32064, context_length=4096, n_layers=32, n_heads=32,
                                n_kv_heads=32, d_model=3072, d_ff=8192, sliding_window=2047, tie_embeddings=False),
}


FAMILY = Family("phi3", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert, gguf=gguf,
                objective="causal_lm", presets=PRESETS)

"""Qwen2's record in the registry: Llama with q/k/v biases."""

from lmlab.config import ModelConfig, llama_like
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.qwen2 import convert, gguf

PRESETS = {
    "qwen2-tiny": llama_like("qwen2", vocab_size=4096, context_length=256, n_layers=4, n_heads=4, n_kv_heads=2,
                             d_model=128, d_ff=352, qkv_bias=True, rope_base=1e6, norm_eps=1e-6),
    "qwen2.5-0.5b": llama_like("qwen2", vocab_size=151936, context_length=32768, n_layers=24, n_heads=14,
                               n_kv_heads=2, d_model=896, d_ff=4864, qkv_bias=True, rope_base=1e6, norm_eps=1e-6),
}


FAMILY = Family("qwen2", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert, gguf=gguf,
                objective="causal_lm", presets=PRESETS)

"""Gemma 3's record in the registry: Gemma 2 with q/k norms, a global layer every sixth and the local
layers' own RoPE base; its config.json says model_type gemma3_text (the text model)."""

from lmlab.config import ModelConfig
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.gemma3 import convert, gguf

PRESETS = {
    "gemma3-tiny": ModelConfig(family="gemma3", vocab_size=4096, context_length=256, n_layers=6, n_heads=4,
                               n_kv_heads=1, d_model=128, d_ff=384, head_size=48, norm="rmsnorm", norm_eps=1e-6,
                               norm_placement="sandwich", ffn="geglu", positions="rope", bias=False, qk_norm="head",
                               scale_embeddings=True, attention_scale=48**-0.5, sliding_window=64, global_every=6,
                               rope_base=1e6, rope_local_base=1e4),
    "gemma-3-270m": ModelConfig(family="gemma3", vocab_size=262144, context_length=32768, n_layers=18, n_heads=4,
                                n_kv_heads=1, d_model=640, d_ff=2048, head_size=256, norm="rmsnorm", norm_eps=1e-6,
                                norm_placement="sandwich", ffn="geglu", positions="rope", bias=False,
                                qk_norm="head", scale_embeddings=True, attention_scale=256**-0.5,
                                sliding_window=512, global_every=6, rope_base=1e6, rope_local_base=1e4),
    "gemma-3-1b": ModelConfig(family="gemma3", vocab_size=262144, context_length=32768, n_layers=26, n_heads=4,
                              n_kv_heads=1, d_model=1152, d_ff=6912, head_size=256, norm="rmsnorm", norm_eps=1e-6,
                              norm_placement="sandwich", ffn="geglu", positions="rope", bias=False, qk_norm="head",
                              scale_embeddings=True, attention_scale=256**-0.5, sliding_window=512,
                              global_every=6, rope_base=1e6, rope_local_base=1e4),
}


FAMILY = Family("gemma3", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert, gguf=gguf,
                objective="causal_lm", model_type="gemma3_text",
                presets=PRESETS)

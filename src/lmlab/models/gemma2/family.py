"""Gemma 2's record in the registry: Llama with (1 + w) norms around each sublayer, GeGLU, a scaled
embedding, soft-capped scores and logits, and local layers alternating with global ones."""

from lmlab.config import ModelConfig
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.gemma2 import convert, gguf

PRESETS = {
    # Gemma: (1 + w) norms around each sublayer, GeGLU, embeddings times sqrt(d_model), queries scaled by
    # query_pre_attn_scalar ** -0.5 (each a setting transformers' Gemma classes compute from the shape)
    "gemma2-tiny": ModelConfig(family="gemma2", vocab_size=4096, context_length=256, n_layers=4, n_heads=4,
                               n_kv_heads=2, d_model=128, d_ff=384, head_size=48, norm="rmsnorm", norm_eps=1e-6,
                               norm_placement="sandwich", ffn="geglu", positions="rope", bias=False,
                               scale_embeddings=True, attention_scale=48**-0.5, attention_softcap=50.0,
                               logit_softcap=30.0, sliding_window=64, global_every=2),
    "gemma-2-2b": ModelConfig(family="gemma2", vocab_size=256000, context_length=8192, n_layers=26, n_heads=8,
                              n_kv_heads=4, d_model=2304, d_ff=9216, head_size=256, norm="rmsnorm", norm_eps=1e-6,
                              norm_placement="sandwich", ffn="geglu", positions="rope", bias=False,
                              scale_embeddings=True, attention_scale=256**-0.5, attention_softcap=50.0,
                              logit_softcap=30.0, sliding_window=4096, global_every=2),
}


FAMILY = Family("gemma2", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert, gguf=gguf,
                objective="causal_lm", presets=PRESETS)

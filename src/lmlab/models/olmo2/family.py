"""OLMo 2's record in the registry: Llama with norms on the sublayers' outputs and q/k RMSNorms over all heads."""

from lmlab.config import ModelConfig, llama_like
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.olmo2 import convert, gguf

PRESETS = {
    "olmo2-tiny": llama_like("olmo2", vocab_size=4096, context_length=256, n_layers=4, n_heads=4, n_kv_heads=2,
                             d_model=128, d_ff=352, norm_placement="output", qk_norm="all", rope_base=5e5,
                             norm_eps=1e-6, tie_embeddings=False),
    "olmo-2-1b": llama_like("olmo2", vocab_size=100352, context_length=4096, n_layers=16, n_heads=16, n_kv_heads=16,
                            d_model=2048, d_ff=8192, norm_placement="output", qk_norm="all", rope_base=5e5,
                            norm_eps=1e-6, tie_embeddings=False),
}


FAMILY = Family("olmo2", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert, gguf=gguf,
                objective="causal_lm", presets=PRESETS)

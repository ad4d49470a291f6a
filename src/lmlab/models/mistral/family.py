"""Mistral's record in the registry: Llama with a sliding window on every layer."""

from lmlab.config import ModelConfig, llama_like
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.mistral import convert

PRESETS = {
    "mistral-tiny": llama_like("mistral", vocab_size=4096, context_length=256, n_layers=4, n_heads=4, n_kv_heads=2,
                               d_model=128, d_ff=352, sliding_window=64, tie_embeddings=False),
}


FAMILY = Family("mistral", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert,
                objective="causal_lm", presets=PRESETS)

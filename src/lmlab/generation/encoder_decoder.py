"""Generation for encoder-decoder models (the original Transformer, T5, BART): read the source once,
then write the target one token at a time.

    generate_encoder_decoder(model, input_ids, attention_mask, GenerationConfig(num_beams=4, max_new_tokens=32))

The encoder runs once per batch, and each decoder layer's cross-attention keys and values of the
encoded source are computed once (`model.memory_kv`) and read at every step; the decoder's own keys
and values grow in a KV cache (`model.new_cache`), so a step feeds only the newest token. Greedy and
sampling run the loop of decoder-only generation (`decode.token_steps`), beam search its beams
(`beam.beam_steps`, HF's rules): only the model calls differ. Beam search makes K rows per source:
the cached cross keys/values are repeated once, the self-attention cache follows the surviving beams
(`KVCache.reorder`). Sources of different lengths are right-padded with attention_mask 0; every
target starts at position 0 with the decoder start token, so targets need no padding.
"""

import dataclasses

import torch

from lmlab.errors import LmlabError
from lmlab.generation.beam import beam_steps
from lmlab.generation.config import GenerationConfig
from lmlab.generation.decode import generations, token_steps
from lmlab.generation.history import History
from lmlab.generation.layout import decoding_view
from lmlab.models.encoder_decoder.model import EncoderDecoder


@torch.inference_mode()
def generate_encoder_decoder(model: EncoderDecoder, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                             config: GenerationConfig) -> list[list[int]]:
    """The new target ids for each source in input_ids (B, S); attention_mask (B, S): 1 on real tokens.

    Each output leaves out the decoder start token and ends before its first stop token (the stop
    token itself is not included, as in `generate`). Stop tokens are config.eos_id, or the model's
    eos_id when unset. At most min(max_new_tokens, the model's max_target_length) tokens.
    """
    check_sources(model, input_ids, attention_mask, config)
    cfg = model.config
    if config.eos_id is None:
        config = dataclasses.replace(config, eos_id=cfg.eos_id)
    device = model.lm_head.weight.device
    input_ids = input_ids.to(device)
    if attention_mask is not None:
        attention_mask = None if bool(attention_mask.all()) else attention_mask.to(device)  # no mask: faster
    B, K = input_ids.size(0), config.num_beams
    N = min(config.max_new_tokens, cfg.max_target_length)

    memory_kv = model.memory_kv(model.encode(input_ids, attention_mask))  # per layer (B, H, S, D) twice
    if K > 1:  # row b*K + k is beam k of source b
        memory_kv = [(k.repeat_interleave(K, dim=0), v.repeat_interleave(K, dim=0)) for k, v in memory_kv]
        attention_mask = attention_mask.repeat_interleave(K, dim=0) if attention_mask is not None else None
    cache = model.new_cache(B * K, N)
    step_model = decoding_view(model)

    def next_logits(tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B*K,) -> the logits (B*K, V) after them, advancing the cache by one."""
        return step_model.decode(tokens[:, None], memory_kv, attention_mask, kv_cache=cache)[:, -1].float()

    start = torch.full((B * K,), cfg.decoder_start_id, dtype=torch.long, device=device)
    logits = next_logits(start)  # (B*K, V)
    history = History(start[:, None], None, logits.size(-1), config)  # HF counts the start token too
    if K > 1:
        def advance(new_token: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            cache.reorder(rows)
            return next_logits(new_token)

        return [g.token_ids for g in beam_steps(logits, advance, history, config, K, N)]

    return [g.token_ids for g in generations(token_steps(logits, next_logits, history, config, N), config.stop_ids, B)]


def check_sources(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                  config: GenerationConfig) -> None:
    """One-line errors for a model that is not an encoder-decoder and for malformed or empty sources."""
    if not isinstance(model, EncoderDecoder):
        kind = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
        raise LmlabError(f"generate_encoder_decoder needs an encoder-decoder model (t5, bart, transformer); "
                         f"'{kind}' is not one: use lmlab.generation.generate for decoder-only models")
    if input_ids.dim() != 2 or input_ids.size(0) == 0 or input_ids.size(1) == 0:
        raise LmlabError(f"input_ids must be a non-empty (batch, source length) tensor; got shape "
                         f"{tuple(input_ids.shape)}")
    if attention_mask is not None:
        if attention_mask.shape != input_ids.shape:
            raise LmlabError(f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids "
                             f"{tuple(input_ids.shape)}; give one 0/1 per source token")
        empty = (attention_mask.sum(dim=1) == 0).nonzero().view(-1).tolist()
        if empty:
            raise LmlabError(f"source {empty[0]} has no real token (its attention_mask is all 0); drop it")
    if config.stop_strings:
        raise LmlabError("stop strings are matched in text; generate_encoder_decoder works on ids: use eos_id")

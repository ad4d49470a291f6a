"""Attention maps: which tokens each head of each layer reads, for one text, in any transformer lmlab builds.

Every attention module (`SelfAttention`, `CrossAttention`, the encoders' `UnpaddedSelfAttention`)
keeps its softmax weights when `need_weights` is set (the explicit path of `attend`, the one HF calls
"eager"). `capturing` sets it on the chosen modules for one pass and collects one map per call, so a
shared block (ALBERT) gives one map per layer. Grouped-query models report their query heads: query
head h reads kv head h // (n_heads / n_kv_heads), as in HF's `output_attentions`.

Two numbers summarise a head (Clark et al. 2019, "What does BERT look at?"): its entropy, how spread
out its weights are (0 nats: one key; log S: uniform), and its mean attention distance, how far from
the query the keys it reads are (self-attention only: a target and a source position have no distance).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.inspect.layers import stack_blocks


@dataclass(frozen=True)
class AttentionMaps:
    """One text's attention maps, one (H, T, S) tensor per layer, rows (queries) summing to 1.

    `self_maps` are a decoder's or an encoder's (an encoder-decoder's encoder: source over source);
    an encoder-decoder adds `decoder_maps` (target over target, causal) and `cross_maps` (target over source).
    """
    self_maps: list[torch.Tensor]
    decoder_maps: list[torch.Tensor] | None = None
    cross_maps: list[torch.Tensor] | None = None


def is_encoder_decoder(model: nn.Module) -> bool:
    return hasattr(model, "encoder") and hasattr(model, "decoder")


@torch.no_grad()
def attention_maps(model: nn.Module, input_ids: torch.Tensor,
                   decoder_input_ids: torch.Tensor | None = None) -> AttentionMaps:
    """The attention maps of one forward pass of input_ids (1, T) through `model` (decoder or encoder),
    or, for an encoder-decoder, of the source input_ids (1, S) and the decoder input ids (1, T)."""
    if input_ids.size(0) != 1:
        raise LmlabError("attention maps are read one text at a time")
    if not is_encoder_decoder(model):
        with capturing(self_attentions(stack_blocks(model))) as maps:
            model(input_ids)
        return AttentionMaps(list(maps))
    if decoder_input_ids is None:
        raise LmlabError("an encoder-decoder needs decoder input ids to show its decoder and cross-attention")
    encoder_blocks, decoder_blocks = stack_blocks(model, "encoder"), stack_blocks(model, "decoder")
    with capturing(self_attentions(encoder_blocks)) as encoder_maps:
        memory = model.encode(input_ids)
    with capturing(self_attentions(decoder_blocks)) as decoder_maps, \
            capturing([block.cross_attention for block in decoder_blocks]) as cross_maps:
        model.decode(decoder_input_ids, memory)
    return AttentionMaps(list(encoder_maps), list(decoder_maps), list(cross_maps))


def self_attentions(blocks: list[nn.Module]) -> list[nn.Module]:
    """Each block's self-attention module (`attention` in a decoder or encoder block, `self_attention`
    in an encoder-decoder's decoder block)."""
    return [block.attention if hasattr(block, "attention") else block.self_attention for block in blocks]


@contextmanager
def capturing(modules: list[nn.Module]) -> Iterator[list[torch.Tensor]]:
    """Inside the block, every call of one of `modules` on one text appends its map (H, T, S) to the
    yielded list, in call order; on exit each module's `need_weights` is restored and its map dropped."""
    distinct = list(dict.fromkeys(modules))  # ALBERT's one attention module is called at every layer
    saved = [module.need_weights for module in distinct]
    maps: list[torch.Tensor] = []

    def keep(module, args, output):
        maps.append(_one_map(module.weights))

    handles = []
    try:
        for module in distinct:
            module.need_weights = True
            handles.append(module.register_forward_hook(keep))
        yield maps
    finally:
        for handle in handles:
            handle.remove()
        for module, need in zip(distinct, saved):
            module.need_weights, module.weights = need, None


def _one_map(weights) -> torch.Tensor:
    """A module's weights for a batch of one text, (1, H, T, S) or the unpadded encoders' list of one
    group [(1, H, T, T)], as a float (H, T, S) tensor on the CPU."""
    if isinstance(weights, list):
        weights = torch.cat(weights)
    if weights.size(0) != 1:
        raise LmlabError("attention maps are read one text at a time")
    return weights[0].detach().float().cpu()


def head_entropy(attention: torch.Tensor) -> torch.Tensor:
    """attention (H, T, S) -> (H,): the mean over queries of -sum_k p log p, in nats."""
    return -torch.special.xlogy(attention, attention).sum(-1).mean(-1)


def head_distance(attention: torch.Tensor) -> torch.Tensor:
    """Self-attention (H, T, T) -> (H,): the mean over queries q of sum_k p(k) |q - k|, in tokens."""
    T = attention.size(-1)
    positions = torch.arange(T, dtype=attention.dtype)
    distance = (positions[:, None] - positions[None, :]).abs()  # (T, T)
    return (attention * distance).sum(-1).mean(-1)

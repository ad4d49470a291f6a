"""Building blocks: the fused and explicit attention paths agree; caches, masks and positions behave."""

import math

import pytest
import torch

from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.modules.attention import CrossAttention, SelfAttention, attend, decoder_mask
from lmlab.modules.kv_cache import KVCache
from lmlab.modules.norms import RMSNorm
from lmlab.modules.positions import RotaryEmbedding, apply_rotary, sinusoidal_table

g = torch.Generator().manual_seed(0)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("causal", [True, False])
def test_fused_and_explicit_attention_agree(n_kv_heads, causal):
    q = torch.randn(2, 4, 7, 8, generator=g)
    k, v = torch.randn(2, n_kv_heads, 7, 8, generator=g), torch.randn(2, n_kv_heads, 7, 8, generator=g)
    fused, none = attend(q, k, v, is_causal=causal)
    explicit, weights = attend(q, k, v, is_causal=causal, need_weights=True)
    assert none is None
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 7))
    if causal:
        assert weights.triu(1).abs().max() == 0


def test_padding_mask_agrees_on_both_paths_and_ignores_padded_keys():
    q, k, v = (torch.randn(2, 2, 5, 4, generator=g) for _ in range(3))
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    mask = decoder_mask(attention_mask, 5, 5)
    fused, _ = attend(q, k, v, mask)
    explicit, weights = attend(q, k, v, mask, need_weights=True)
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=1e-5)
    assert weights[0, :, 2:, :2].abs().max() == 0  # real queries never read padding
    assert not torch.isnan(weights).any()


def test_explicit_attention_is_softmax_of_scaled_scores():
    q, k, v = (torch.randn(1, 1, 3, 4, generator=g) for _ in range(3))
    _, weights = attend(q, k, v, need_weights=True)
    expected = torch.softmax(q[0, 0] @ k[0, 0].T / math.sqrt(4), dim=-1)
    torch.testing.assert_close(weights[0, 0], expected)


def test_grouped_query_heads_share_keys():
    attn = SelfAttention(d_model=16, n_heads=4, n_kv_heads=2, bias=False)
    assert attn.qkv.out_features == (4 + 2 * 2) * 4
    attn.need_weights = True
    attn(torch.randn(1, 5, 16, generator=g))
    assert attn.weights.shape == (1, 4, 5, 5)


def test_cross_attention_respects_memory_mask():
    attn = CrossAttention(d_model=16, n_heads=2, d_memory=8)
    attn.need_weights = True
    x, memory = torch.randn(2, 3, 16, generator=g), torch.randn(2, 6, 8, generator=g)
    memory_mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6])
    out = attn(x, memory, memory_mask)
    assert out.shape == (2, 3, 16)
    assert attn.weights[0, :, :, 4:].abs().max() == 0
    attn.need_weights = False
    torch.testing.assert_close(attn(x, memory, memory_mask), out, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_kv_cache_gives_same_logits_as_full_forward(name):
    cfg = preset(name, vocab_size=50, n_layers=2)
    model = build_decoder(cfg).eval()
    ids = torch.randint(0, 50, (2, 10), generator=g)
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(cfg.n_layers, 2, cfg.n_kv_heads or cfg.n_heads, cfg.head_dim, 16)
        steps = [model(ids[:, :6], kv_cache=cache)] + [model(ids[:, t:t + 1], kv_cache=cache) for t in range(6, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 10


def test_kv_cache_reorder_keeps_selected_rows():
    cache = KVCache(1, 3, 1, 2, 4)
    k = torch.arange(3.0)[:, None, None, None].expand(3, 1, 1, 2)
    cache.layer(0).update(k, k)
    cache.advance(1)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.k[0][:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]


def test_rope_scores_depend_only_on_relative_position():
    rope = RotaryEmbedding(head_dim=8, max_len=64, base=10000.0)
    q, k = torch.randn(1, 1, 1, 8, generator=g), torch.randn(1, 1, 1, 8, generator=g)

    def score(m, n):
        qm = apply_rotary(q, rope(torch.tensor([m])))
        kn = apply_rotary(k, rope(torch.tensor([n])))
        return (qm * kn).sum().item()

    assert score(3, 1) == pytest.approx(score(40, 38), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_rope_base_changes_rotation():
    pos = torch.tensor([5])
    assert not torch.allclose(RotaryEmbedding(8, 16, 10000.0)(pos)[0], RotaryEmbedding(8, 16, 500.0)(pos)[0])


def test_sinusoidal_table_formula():
    table = sinusoidal_table(10, 6)
    assert table[3, 2].item() == pytest.approx(math.sin(3 / 10000 ** (2 / 6)), abs=1e-6)
    assert table[3, 3].item() == pytest.approx(math.cos(3 / 10000 ** (2 / 6)), abs=1e-6)


def test_rmsnorm_normalises_root_mean_square():
    x = torch.randn(4, 16, generator=g) * 7
    y = RMSNorm(16)(x)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(4), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("overrides", [
    dict(norm_placement="post"), dict(positions="sinusoidal"), dict(positions="rope"),
    dict(tie_embeddings=False), dict(norm="rmsnorm", ffn="swiglu"),
])
def test_variants_build_and_cache_consistently(overrides):
    cfg = preset("gpt2-tiny", vocab_size=40, n_layers=2, **overrides)
    model = build_decoder(cfg).eval()
    assert (model.lm_head.weight is model.token_embedding.weight) == cfg.tie_embeddings
    ids = torch.randint(0, 40, (1, 8), generator=g)
    with torch.no_grad():
        cache = KVCache(2, 1, cfg.n_heads, cfg.head_dim, 8)
        cached = torch.cat([model(ids[:, :4], kv_cache=cache), model(ids[:, 4:], kv_cache=cache)], dim=1)
        torch.testing.assert_close(cached, model(ids), atol=1e-5, rtol=1e-5)

"""`torch.compile` with dynamic shapes traces self-attention whole: no graph break at SDPA's flags (which
must be plain bools, not symbolic ones), and one graph for every number of cached keys."""

import torch
from torch._dynamo.utils import counters

from lmlab.modules.attention import SelfAttention
from lmlab.modules.kv_cache import LayerKV


def test_grouped_query_attention_over_a_cache_compiles_once_in_one_graph():
    torch.manual_seed(0)
    attention = SelfAttention(d_model=32, n_heads=4, n_kv_heads=2).eval()
    step = torch.compile(attention, dynamic=True, fullgraph=True)  # fullgraph: a graph break is an error
    torch._dynamo.reset()
    counters.clear()
    with torch.inference_mode():
        for cached in (5, 9):
            k, v = torch.randn(1, 2, cached + 1, 8), torch.randn(1, 2, cached + 1, 8)  # (B, H_kv, S, D)
            x = torch.randn(1, 1, 32)  # (B, T, C): one new token
            expected = attention(x, None, None, LayerKV(k.clone(), v.clone(), cached))
            assert torch.allclose(step(x, None, None, LayerKV(k, v, cached)), expected, atol=1e-6)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["recompiles"]
    torch._dynamo.reset()

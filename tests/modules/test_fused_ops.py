"""The fused autograd ops (RoPE, RMSNorm, SwiGLU) give the plain formula's outputs, and their
hand-written backward passes give autograd's gradients (torch.autograd.gradcheck in float64)."""

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

from lmlab.modules.fused_rms_norm import fused_rms_norm
from lmlab.modules.fused_rope import fused_rotary
from lmlab.modules.fused_swiglu import fused_swiglu
from lmlab.modules.positions import RotaryEmbedding, apply_rotary

g = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float64, requires_grad=False):
    return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(requires_grad)


def plain_rms_norm(x, weight, eps):
    return weight * F.rms_norm(x.float(), (x.size(-1),), eps=eps).to(x.dtype)


def plain_swiglu(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


ROPE_POSITIONS = {"shared": torch.arange(3, 8), "per-row": torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])}


@pytest.mark.parametrize("positions", ROPE_POSITIONS.values(), ids=ROPE_POSITIONS.keys())
def test_fused_rotary_equals_apply_rotary_and_its_gradient_passes_gradcheck(positions):
    rope = RotaryEmbedding(head_dim=8, max_len=16).double()(positions)
    # a strided view, as attention passes it: the first 5 of 7 heads of a (B, T, heads, D) tensor
    x = randn(2, 5, 7, 8, requires_grad=True).transpose(1, 2)[:, :5]  # (B, H, T, D)
    assert torch.allclose(fused_rotary(x, rope), apply_rotary(x, rope), atol=1e-15)
    assert gradcheck(lambda x: fused_rotary(x, rope), (x,))


def test_fused_rotary_keeps_apply_rotary_numerics_in_bf16():
    rope = RotaryEmbedding(head_dim=16, max_len=32)(torch.arange(32))  # fp32 tables, as in a bf16 autocast
    x = randn(2, 3, 32, 16, dtype=torch.bfloat16)
    got = fused_rotary(x, rope)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, apply_rotary(x, rope))


def test_fused_rms_norm_equals_formula_and_its_gradient_passes_gradcheck():
    x, weight = randn(2, 5, 6, requires_grad=True), randn(6, requires_grad=True)
    assert torch.allclose(fused_rms_norm(x, weight, 1e-5), plain_rms_norm(x, weight, 1e-5), atol=1e-6)
    assert gradcheck(lambda x, w: fused_rms_norm(x, w, 1e-5), (x, weight))


def test_fused_rms_norm_gradients_equal_autograds_in_fp32():
    x, weight = randn(4, 9, 32, dtype=torch.float32, requires_grad=True), randn(32, dtype=torch.float32, requires_grad=True)
    upstream = randn(4, 9, 32, dtype=torch.float32)
    fused = torch.autograd.grad((fused_rms_norm(x, weight, 1e-6) * upstream).sum(), (x, weight))
    plain = torch.autograd.grad((plain_rms_norm(x, weight, 1e-6) * upstream).sum(), (x, weight))
    for got, expected in zip(fused, plain):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_fused_rms_norm_rounds_like_the_module_in_bf16():
    x, weight = randn(3, 64, dtype=torch.bfloat16), randn(64, dtype=torch.float32)
    got = fused_rms_norm(x, weight, 1e-6)
    assert got.dtype == torch.float32  # an fp32 weight times the bf16 normalised x, as before
    assert torch.equal(got, plain_rms_norm(x, weight, 1e-6))


def test_fused_swiglu_equals_formula_and_its_gradient_passes_gradcheck():
    gate_up = randn(2, 5, 12, requires_grad=True)
    assert torch.equal(fused_swiglu(gate_up), plain_swiglu(gate_up))
    assert gradcheck(fused_swiglu, (gate_up,))


def test_fused_swiglu_gradient_equals_autograds_in_fp32():
    gate_up = randn(3, 7, 40, dtype=torch.float32, requires_grad=True)
    upstream = randn(3, 7, 20, dtype=torch.float32)
    (fused,) = torch.autograd.grad((fused_swiglu(gate_up) * upstream).sum(), gate_up)
    (plain,) = torch.autograd.grad((plain_swiglu(gate_up) * upstream).sum(), gate_up)
    torch.testing.assert_close(fused, plain, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("no_grad", [torch.no_grad, torch.inference_mode], ids=["no_grad", "inference_mode"])
def test_fused_ops_without_autograd_equal_the_functions_output(dtype, no_grad):
    """Without autograd the ops skip their autograd Function (for speed and torch.compile): same bits."""
    rope = RotaryEmbedding(head_dim=8, max_len=16)(torch.arange(3, 8))  # fp32 tables
    x = randn(2, 5, 7, 8, dtype=dtype).transpose(1, 2)[:, :5]  # (B, H, T, D), a strided view
    h, weight, gate_up = randn(3, 5, 16, dtype=dtype), randn(16, dtype=dtype), randn(3, 5, 32, dtype=dtype)
    with_function = [fused_rotary(x, rope), fused_rms_norm(h, weight, 1e-6), fused_swiglu(gate_up)]
    with no_grad():
        direct = [fused_rotary(x, rope), fused_rms_norm(h, weight, 1e-6), fused_swiglu(gate_up)]
    for got, expected in zip(direct, with_function):
        assert got.dtype == expected.dtype and torch.equal(got, expected)

"""Unpadding: packing the real tokens of a padded batch and attending over them gives what the
padded computation gives at the real tokens, forward and backward; a batch without padding takes
the cheap path (a view, one batched attention)."""

import pytest
import torch

from lmlab.modules.attention import SelfAttention, padding_mask
from lmlab.modules.encoder_decoder import with_bias
from lmlab.modules.relative_position import RelativePositionBias
from lmlab.modules.unpadding import UnpaddedSelfAttention, Unpadding

pytestmark = pytest.mark.usefixtures("one_thread")


def ragged_mask() -> torch.Tensor:
    """(3, 7): one full row, one right-padded, one with a hole (left and inner padding too)."""
    return torch.tensor([[1, 1, 1, 1, 1, 1, 1],
                         [1, 1, 1, 1, 0, 0, 0],
                         [0, 1, 1, 0, 1, 1, 0]])


def assert_equal_at_real_tokens(expected, got, real, x, x_packed, padded, unpadded) -> None:
    """The unpadded output `got` (N, C) equals the padded `expected` (B, T, C) at the real tokens, and
    so do the gradients (of x and of every weight) of a loss that reads only those: padding's
    outputs are meaningless."""
    torch.testing.assert_close(got, expected[real], atol=1e-6, rtol=1e-5)
    target = torch.randn_like(got)
    (expected[real] * target).sum().backward()
    (got * target).sum().backward()
    torch.testing.assert_close(x_packed.grad, x.grad[real], atol=1e-6, rtol=1e-5)
    for (name, p), q in zip(padded.named_parameters(), unpadded.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_pack_keeps_the_real_tokens_in_order_and_unpack_puts_zeros_at_padding():
    mask = ragged_mask()
    x = torch.randn(3, 7, 5)
    layout = Unpadding.of(mask, 3, 7)
    packed = layout.pack(x)
    assert packed.shape == (int(mask.sum()), 5)
    assert torch.equal(packed, x[mask.bool()])
    back = layout.unpack(packed)
    assert torch.equal(back[mask.bool()], x[mask.bool()]) and not back[mask == 0].any()


@pytest.mark.parametrize("mask", [None, torch.ones(2, 4, dtype=torch.long)])
def test_a_batch_without_padding_is_packed_by_a_view_and_attended_as_one_group(mask):
    layout = Unpadding.of(mask, 2, 4)
    x = torch.randn(2, 4, 3)
    packed = layout.pack(x)
    assert packed.data_ptr() == x.data_ptr() and torch.equal(layout.unpack(packed), x)
    [group] = layout.sequences(packed)
    assert group.shape == (2, 4, 3) and group.data_ptr() == x.data_ptr()


def test_sequences_are_the_rows_real_tokens_with_rows_of_one_length_together():
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [0, 1, 0]])
    x = torch.randn(4, 3, 2)
    layout = Unpadding.of(mask, 4, 3)
    groups = layout.sequences(layout.pack(x))
    assert [g.shape[:2] for g in groups] == [(2, 2), (1, 3), (1, 1)]
    assert torch.equal(groups[0], x[:2, :2]) and torch.equal(groups[1], x[2:3]) and torch.equal(groups[2], x[3:, 1:2])


def test_unpadded_attention_gives_padded_attention_outputs_and_gradients_at_real_tokens():
    torch.manual_seed(0)
    mask = ragged_mask()
    real = mask.bool()
    padded = SelfAttention(16, 4, bias=True)
    unpadded = UnpaddedSelfAttention(16, 4, bias=True)
    unpadded.load_state_dict(padded.state_dict())
    x = torch.randn(3, 7, 16, requires_grad=True)
    x_packed = x.detach()[real].requires_grad_()

    expected = padded(x, padding_mask(mask, 7, x.device))  # (B, T, C)
    got = unpadded(x_packed, Unpadding.of(mask, 3, 7))  # (N, C)
    assert_equal_at_real_tokens(expected, got, real, x, x_packed, padded, unpadded)


def test_attention_maps_are_kept_per_sequence_and_equal_the_padded_maps():
    torch.manual_seed(1)
    mask = ragged_mask()
    padded = SelfAttention(16, 4, bias=True)
    unpadded = UnpaddedSelfAttention(16, 4, bias=True)
    unpadded.load_state_dict(padded.state_dict())
    padded.need_weights = unpadded.need_weights = True
    x = torch.randn(3, 7, 16)
    with torch.no_grad():
        padded(x, padding_mask(mask, 7, x.device))
        unpadded(x[mask.bool()], Unpadding.of(mask, 3, 7))
    for row, weights in enumerate(unpadded.weights):  # the three rows have three lengths: one map each
        real = mask[row].bool()
        torch.testing.assert_close(weights[0], padded.weights[row][:, real][:, :, real])


@pytest.mark.parametrize("mask", [torch.tensor([[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]),
                                  torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])],
                         ids=["left-and-right-padding", "right-padding"])
@pytest.mark.parametrize("per_length", [False, True], ids=["one-padded-call", "one-call-per-length"])
def test_a_relative_position_bias_cut_to_each_length_gives_the_padded_t5_attention(mask, per_length):
    """T5's encoder attention: head_dim apart from d_model / heads, no 1/sqrt(d) scale, a bias of
    relative positions added to the scores; each sequence gets its top-left corner of the bias.
    Attention runs in one padded call, or per length when the maps are kept (need_weights)."""
    torch.manual_seed(2)
    real = mask.bool()
    padded_bias = RelativePositionBias(4, bidirectional=True, n_buckets=8, max_distance=16)
    unpadded_bias = RelativePositionBias(4, bidirectional=True, n_buckets=8, max_distance=16)
    unpadded_bias.load_state_dict(padded_bias.state_dict())
    positions = torch.arange(6)
    padded = SelfAttention(16, 4, bias=False, head_dim=8, scale=1.0)
    unpadded = UnpaddedSelfAttention(16, 4, bias=False, head_dim=8, scale=1.0)
    unpadded.load_state_dict(padded.state_dict())
    unpadded.need_weights = per_length
    x = torch.randn(3, 6, 16, requires_grad=True)
    x_packed = x.detach()[real].requires_grad_()

    expected = padded(x, with_bias(padded_bias(positions, positions), padding_mask(mask, 6, x.device)))
    got = unpadded(x_packed, Unpadding.of(mask, 3, 6).with_score_bias(unpadded_bias(positions, positions)))
    assert_equal_at_real_tokens(expected, got, real, x, x_packed, padded, unpadded)
    torch.testing.assert_close(unpadded_bias.table.weight.grad, padded_bias.table.weight.grad, atol=1e-6, rtol=1e-5)


def test_a_source_of_padding_only_leaves_the_others_alone_and_every_gradient_finite():
    torch.manual_seed(3)
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    bias_module = RelativePositionBias(2, bidirectional=True, n_buckets=8, max_distance=16)
    attention = UnpaddedSelfAttention(8, 2, bias=False, scale=1.0)
    x = torch.randn(int(mask.sum()), 8, requires_grad=True)
    positions = torch.arange(4)
    y = attention(x, Unpadding.of(mask, 3, 4).with_score_bias(bias_module(positions, positions)))
    alone = attention(x[:3], Unpadding.of(mask[:1, :3], 1, 3).with_score_bias(bias_module(positions[:3], positions[:3])))
    torch.testing.assert_close(y[:3], alone)
    y.sum().backward()
    assert all(t.grad.isfinite().all() for t in (x, bias_module.table.weight, attention.qkv.weight))

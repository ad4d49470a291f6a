"""The RNN encoder-decoder: shapes, the attention formulas, padding masks, teacher forcing."""

import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.models.seq2seq import ATTENTION_KINDS, Seq2SeqConfig, build_seq2seq
from lmlab.models.seq2seq.attention import AdditiveAttention, DotAttention, MultiplicativeAttention
from lmlab.objectives.teacher_forcing import teacher_forcing
from lmlab.targets import IGNORE_INDEX

pytestmark = pytest.mark.usefixtures("one_thread")

# Two sources, the second shorter (padded with 0); the ids 4.. are characters, 2 is </s>.
SRC = torch.tensor([[5, 6, 7, 8, 2], [9, 5, 2, 0, 0]])
TGT_IN = torch.tensor([[1, 4, 5, 6], [1, 7, 0, 0]])


def tiny(attention: str, **overrides):
    torch.manual_seed(0)
    return build_seq2seq(Seq2SeqConfig(12, 10, embed_dim=8, hidden=16, attention=attention, attention_dim=8,
                                       **overrides)).eval()


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_every_attention_gives_logits_and_weights_of_the_right_shape(attention):
    model = tiny(attention)
    encoded = model.encode(SRC)
    logits, state, weights = model.decode(TGT_IN, encoded)
    assert logits.shape == (2, 4, 10) and state.shape == (1, 2, 16) and encoded.memory.shape == (2, 5, 16)
    if attention == "none":
        assert weights is None
    else:
        assert weights.shape == (2, 4, 5)
        assert torch.allclose(weights.sum(-1), torch.ones(2, 4))
        assert (weights[1, :, 3:] == 0).all()  # padded source positions get no attention


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_padding_a_row_changes_nothing(attention):
    """A source decoded alone or in a batch beside a longer one gives the same logits."""
    model = tiny(attention)
    batched = model(SRC, TGT_IN)
    alone = model(SRC[1:, :3], TGT_IN[1:])
    torch.testing.assert_close(batched[1:], alone, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_teacher_forced_pass_equals_one_step_at_a_time(attention):
    model = tiny(attention)
    encoded = model.encode(SRC)
    whole = model.decode(TGT_IN, encoded)[0]
    state, steps = None, []
    for t in range(TGT_IN.size(1)):
        logits, state, _ = model.decode(TGT_IN[:, t:t + 1], encoded, state)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, atol=1e-6, rtol=1e-5)


def test_no_attention_reads_the_source_only_through_the_initial_state():
    model = tiny("none")
    encoded = model.encode(SRC)
    other = model.encode(torch.tensor([[7, 7, 7, 7, 2], [4, 4, 2, 0, 0]]))
    same_start = type(encoded)(other.memory, other.mask, encoded.state)
    torch.testing.assert_close(model.decode(TGT_IN, encoded)[0], model.decode(TGT_IN, same_start)[0])


def masked_softmax(scores, mask):
    return scores.masked_fill(~mask[:, None, :], float("-inf")).softmax(-1)


def test_additive_attention_is_v_tanh_of_ws_plus_uh():
    torch.manual_seed(1)
    attn = AdditiveAttention(6, 4, 5)
    s, h, mask = torch.randn(2, 3, 6), torch.randn(2, 7, 4), torch.ones(2, 7, dtype=torch.bool)
    mask[0, 5:] = False
    W, U, b, v = attn.query_proj.weight, attn.memory_proj.weight, attn.memory_proj.bias, attn.v.weight[0]
    scores = torch.einsum("a,btsa->bts", v, torch.tanh((s @ W.T)[:, :, None] + (h @ U.T + b)[:, None]))
    context, weights = attn(s, h, mask)
    torch.testing.assert_close(weights, masked_softmax(scores, mask))
    torch.testing.assert_close(context, weights @ h)


def test_multiplicative_attention_is_s_w_h_and_dot_is_s_h():
    torch.manual_seed(2)
    s, h, mask = torch.randn(2, 3, 4), torch.randn(2, 7, 4), torch.ones(2, 7, dtype=torch.bool)
    mask[1, 2:] = False
    general = MultiplicativeAttention(4, 4)
    W = general.weight.weight  # (query, memory)
    torch.testing.assert_close(general(s, h, mask)[1], masked_softmax(torch.einsum("btq,qm,bsm->bts", s, W, h), mask))
    torch.testing.assert_close(DotAttention(4, 4)(s, h, mask)[1], masked_softmax(s @ h.transpose(1, 2), mask))
    with pytest.raises(ValueError, match="equal sizes"):
        DotAttention(4, 6)


def test_config_refuses_unknown_attention_and_odd_hidden():
    with pytest.raises(LmlabError, match="unknown attention 'luong'"):
        Seq2SeqConfig(10, 10, attention="luong")
    with pytest.raises(LmlabError, match="even"):
        Seq2SeqConfig(10, 10, hidden=15)


def test_teacher_forcing_feeds_bos_plus_reference_and_predicts_reference_plus_eos():
    src, tgt_in, tgt_out = teacher_forcing([[5, 6, 2], [7, 2]], [[8, 9, 2], [4, 2]], bos_id=1, pad_id=0)
    assert src.tolist() == [[5, 6, 2], [7, 2, 0]]
    assert tgt_in.tolist() == [[1, 8, 9], [1, 4, 0]]
    assert tgt_out.tolist() == [[8, 9, 2], [4, 2, IGNORE_INDEX]]


@pytest.mark.parametrize("sources, targets, message", [
    ([[5, 2], [7, 2]], [[8, 2], []], "pair 1 has an empty target"),
    ([[5, 2], []], [[8, 2], [4, 2]], "pair 1 has an empty source"),
    ([], [], "at least one pair"),
    ([[5, 2]], [[8, 2], [4, 2]], "1 sources, 2 targets")])
def test_teacher_forcing_refuses_empty_rows_instead_of_misaligning_them(sources, targets, message):
    with pytest.raises(LmlabError, match=message):
        teacher_forcing(sources, targets, bos_id=1, pad_id=0)

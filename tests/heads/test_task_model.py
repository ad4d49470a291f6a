"""`heads.task_model.EncoderWithHead`: the encoder's output each head reads, multiple choice flattened and
folded back, and heads that take sizes alone (no encoder inside, any encoder under them)."""

import pytest
import torch

from lmlab.heads.multiple_choice import MultipleChoice
from lmlab.heads.sequence_classification import SequenceClassifier
from lmlab.heads.span_extraction import SpanExtractor
from lmlab.heads.task_model import EncoderWithHead
from lmlab.heads.token_classification import TokenClassifier
from lmlab.models.encoders import build
from lmlab.models.presets import preset

pytestmark = pytest.mark.usefixtures("one_thread")

CFG = preset("bert-tiny", vocab_size=60, context_length=16, n_layers=1, n_heads=2, d_model=16, d_ff=32)


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    return build(CFG).eval()


def batch(*shape: int):
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(5, CFG.vocab_size, shape, generator=generator)
    mask = torch.ones_like(ids)
    mask[..., -2:] = 0
    return ids * mask, mask


def test_heads_hold_only_their_own_weights():
    assert set(SequenceClassifier(16, 3).state_dict()) == {"classifier.weight", "classifier.bias"}
    assert set(SpanExtractor(16).state_dict()) == {"span.weight", "span.bias"}


def test_a_pooled_head_reads_the_pooled_vector_and_a_hidden_head_every_position(encoder):
    ids, mask = batch(3, 8)
    classifier, tagger = SequenceClassifier(16, 3).eval(), TokenClassifier(16, 4).eval()
    with torch.no_grad():
        assert torch.equal(EncoderWithHead(encoder, classifier)(ids, mask), classifier(encoder.pooled(ids, mask)))
        assert torch.equal(EncoderWithHead(encoder, tagger)(ids, mask), tagger(encoder(ids, mask)))


def test_the_span_head_gets_the_mask_and_never_answers_in_padding(encoder):
    ids, mask = batch(2, 8)
    with torch.no_grad():
        start, end = EncoderWithHead(encoder, SpanExtractor(16))(ids, mask)
        unmasked, _ = EncoderWithHead(encoder, SpanExtractor(16))(ids)
    assert start.shape == end.shape == (2, 8)
    assert start[:, -2:].eq(float("-inf")).all() and end[:, :-2].isfinite().all()
    assert unmasked.isfinite().all()


def test_multiple_choice_scores_each_choice_as_its_own_sequence(encoder):
    ids, mask = batch(2, 3, 8)  # 2 questions, 3 choices
    types = torch.zeros_like(ids)
    types[..., 4:] = 1
    model = EncoderWithHead(encoder, MultipleChoice(16)).eval()
    with torch.no_grad():
        scores = model(ids, mask, types)
        one_by_one = torch.stack([torch.stack([model.head(encoder.pooled(ids[b, k][None], mask[b, k][None],
                                                                           types[b, k][None]))[0]
                                               for k in range(3)]) for b in range(2)])
    assert scores.shape == (2, 3)
    torch.testing.assert_close(scores, one_by_one, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("family", ["bert-tiny", "roberta-tiny", "albert-tiny", "electra-tiny", "deberta-tiny"])
def test_any_encoder_family_runs_under_a_head(family):
    torch.manual_seed(0)
    network = build(preset(family, vocab_size=60, context_length=16, n_layers=2, n_heads=2, d_model=16, d_ff=32,
                           pooler=True))
    ids, mask = batch(2, 8)
    logits = EncoderWithHead(network, SequenceClassifier(16, 2))(ids, mask)
    assert logits.shape == (2, 2)
    logits.sum().backward()
    assert network.embeddings.token.weight.grad is not None


def test_a_head_that_names_no_known_input_is_refused():
    class Odd(torch.nn.Module):
        reads = "everything"
    with pytest.raises(ValueError, match="everything"):
        EncoderWithHead(torch.nn.Identity(), Odd())


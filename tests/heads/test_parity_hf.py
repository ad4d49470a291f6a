"""The fine-tuning heads against Hugging Face's: same encoder and head weights give the same logits
(BertForSequenceClassification, -TokenClassification, -QuestionAnswering, -MultipleChoice)."""

import pytest
import torch

from lmlab.heads.multiple_choice import MultipleChoice
from lmlab.heads.regression import SequenceRegressor
from lmlab.heads.sequence_classification import SequenceClassifier
from lmlab.heads.span_extraction import SpanExtractor
from lmlab.heads.task_model import EncoderWithHead
from lmlab.heads.token_classification import TokenClassifier
from lmlab.losses.task_heads import classification_loss
from lmlab.models.bert import convert
from lmlab.models.bert.build import build_encoder
from lmlab.models.presets import preset

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]

CFG = preset("bert-tiny", vocab_size=100, context_length=32, n_layers=2, n_heads=2, d_model=32, d_ff=64)


def reference(hf_class, **config):
    """A random HF BERT model with a head; every weight perturbed so zero biases do not hide bugs."""
    torch.manual_seed(0)
    model = hf_class(transformers.BertConfig(**convert.config_to_hf(CFG), **config)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def copied(head: torch.nn.Module, hf_model, head_names: dict[str, str], pooler: bool = True) -> EncoderWithHead:
    """A new encoder with `head` on top, holding `hf_model`'s encoder weights and its head tensors
    (the head's name -> HF name)."""
    model = EncoderWithHead(build_encoder(CFG.replace(pooler=pooler)), head)
    hf_state = hf_model.state_dict()
    encoder_state = {k.removeprefix("bert."): v for k, v in hf_state.items() if k.startswith("bert.")}
    model.encoder.load_state_dict(convert.from_hf(encoder_state, model.encoder.config))
    head.load_state_dict({ours: hf_state[theirs] for ours, theirs in head_names.items()})
    return model.eval()


def inputs(*shape: int):
    """Random ids with right padding and a second segment, shaped (…, T)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, CFG.vocab_size, shape, generator=generator)
    mask = torch.ones_like(ids)
    mask[..., -3:] = 0
    mask.view(-1, shape[-1])[0, -3:] = 1  # one row unpadded
    types = torch.zeros_like(ids)
    types[..., shape[-1] // 2:] = 1
    return ids * mask, mask, types * mask


CLASSIFIER = {"classifier.weight": "classifier.weight", "classifier.bias": "classifier.bias"}


def test_sequence_classifier_logits_equal_hf_bert_for_sequence_classification():
    hf = reference(transformers.BertForSequenceClassification, num_labels=3)
    ours = copied(SequenceClassifier(CFG.d_model, 3), hf, CLASSIFIER)
    ids, mask, types = inputs(4, 12)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types).logits
        assert (ours(ids, mask, types) - expected).abs().max().item() <= 1e-5


def test_sequence_classifier_gradients_equal_hf_for_every_weight_on_a_padded_batch():
    hf = reference(transformers.BertForSequenceClassification, num_labels=3)
    ours = copied(SequenceClassifier(CFG.d_model, 3), hf, CLASSIFIER)  # eval mode: no dropout, same maths
    ids, mask, types = inputs(4, 12)
    labels = torch.tensor([0, 2, 1, 2])
    hf(ids, attention_mask=mask, token_type_ids=types, labels=labels).loss.backward()
    classification_loss(ours(ids, mask, types), labels).backward()
    expected = {name: p.grad for name, p in hf.named_parameters()}
    encoder_grads = convert.to_hf({name: p.grad for name, p in ours.encoder.named_parameters()}, CFG)
    got = {f"bert.{name}": g for name, g in encoder_grads.items()} | {
        f"classifier.{name}": p.grad for name, p in ours.head.classifier.named_parameters()}
    assert got.keys() == expected.keys()
    for name, grad in got.items():
        torch.testing.assert_close(grad, expected[name], atol=1e-6, rtol=1e-4, msg=name)


def test_regressor_scores_equal_hf_with_one_label():
    hf = reference(transformers.BertForSequenceClassification, num_labels=1)
    ours = copied(SequenceRegressor(CFG.d_model), hf, CLASSIFIER)
    ids, mask, types = inputs(4, 12)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types).logits.squeeze(-1)
        assert (ours(ids, mask, types) - expected).abs().max().item() <= 1e-5


def test_token_classifier_logits_equal_hf_bert_for_token_classification():
    hf = reference(transformers.BertForTokenClassification, num_labels=5)
    ours = copied(TokenClassifier(CFG.d_model, 5), hf, CLASSIFIER, pooler=False)
    ids, mask, types = inputs(3, 10)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        got = ours(ids, mask)
    real = mask.bool()
    assert (got[real] - expected[real]).abs().max().item() <= 1e-5


def test_span_extractor_logits_equal_hf_bert_for_question_answering():
    hf = reference(transformers.BertForQuestionAnswering)
    ours = copied(SpanExtractor(CFG.d_model), hf, {"span.weight": "qa_outputs.weight", "span.bias": "qa_outputs.bias"},
                  pooler=False)
    ids, mask, types = inputs(3, 10)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types)
        start, end = ours(ids, mask, types)
    real = mask.bool()
    assert (start[real] - expected.start_logits[real]).abs().max().item() <= 1e-5
    assert (end[real] - expected.end_logits[real]).abs().max().item() <= 1e-5
    assert start[~real].eq(float("-inf")).all() and end[~real].eq(float("-inf")).all()  # padding is never an answer


def test_multiple_choice_logits_equal_hf_bert_for_multiple_choice():
    hf = reference(transformers.BertForMultipleChoice)
    ours = copied(MultipleChoice(CFG.d_model), hf, CLASSIFIER)
    ids, mask, types = inputs(2, 4, 9)  # 2 questions, 4 choices each
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask, token_type_ids=types).logits
        got = ours(ids, mask, types)
    assert got.shape == (2, 4)
    assert (got - expected).abs().max().item() <= 1e-5

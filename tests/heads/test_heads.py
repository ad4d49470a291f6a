"""Head logic that HF parity does not cover: first-sub-token labels, the best valid QA span, losses."""

import pytest
import torch

from lmlab.data.encoder_batches import first_subtoken_labels
from lmlab.heads.span_extraction import best_spans
from lmlab.losses.task_heads import span_loss, tagging_loss
from lmlab.targets import IGNORE_INDEX

I = IGNORE_INDEX


def test_only_the_first_subtoken_of_each_word_carries_its_label():
    # [CLS] nai ##ro ##bi is big [SEP] [PAD]: word 0 has three pieces
    word_ids = [None, 0, 0, 0, 1, 2, None, None]
    assert first_subtoken_labels(word_ids, [3, 0, 1]) == [I, 3, I, I, 0, 1, I, I]


def test_tagging_loss_ignores_unlabelled_tokens():
    logits = torch.randn(1, 4, 3)
    labels = torch.tensor([[I, 2, I, 0]])
    expected = torch.nn.functional.cross_entropy(logits[0, [1, 3]], torch.tensor([2, 0]))
    assert torch.allclose(tagging_loss(logits, labels), expected)


def test_best_span_is_the_highest_valid_one_not_the_raw_argmaxes():
    #                     CLS  q    SEP  c0   c1   c2   c3   SEP
    start = torch.tensor([[9.0, 8.0, 0.0, 1.5, 0.0, 3.0, 0.0, 0.0]])
    end = torch.tensor([[9.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 7.0]])
    context = torch.tensor([[False, False, False, True, True, True, True, False]])
    # CLS, the question and the final SEP lie outside the context; (c2, c1) would score 5 but ends
    # before it starts; the best valid span is (c0, c1): 1.5 + 2 = 3.5 against 3 for (c2, c2)
    assert best_spans(start, end, context, max_answer_length=10).tolist() == [[3, 4]]


def test_best_span_respects_the_maximum_answer_length():
    start = torch.tensor([[0.0, 5.0, 0.0, 0.0, 0.0]])
    end = torch.tensor([[0.0, 0.0, 0.0, 0.0, 5.0]])
    context = torch.ones(1, 5, dtype=torch.bool)
    assert best_spans(start, end, context, max_answer_length=4).tolist() == [[1, 4]]  # 4 tokens: allowed
    span = best_spans(start, end, context, max_answer_length=3)[0].tolist()
    assert span != [1, 4] and span[1] - span[0] < 3


@pytest.mark.parametrize("positions", [[[1, 2]], [[0, 0]]])
def test_span_loss_is_the_mean_of_start_and_end_cross_entropies(positions):
    start, end = torch.randn(1, 5), torch.randn(1, 5)
    positions = torch.tensor(positions)
    ce = torch.nn.functional.cross_entropy
    expected = (ce(start, positions[:, 0]) + ce(end, positions[:, 1])) / 2
    assert torch.allclose(span_loss((start, end), positions), expected)

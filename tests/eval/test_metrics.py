"""Task metrics against values worked out by hand in each test."""

import math

import pytest

from lmlab.errors import LmlabError
from lmlab.eval.entity_f1 import bio_entities, entity_f1
from lmlab.eval.metrics import accuracy, f1_scores, matthews_correlation, pearson, ranks, spearman
from lmlab.eval.qa_metrics import exact_match, normalize_answer, token_f1

GOLD = ["a", "a", "a", "b", "b", "c"]
PRED = ["a", "a", "b", "b", "c", "c"]


def test_accuracy_is_the_share_right():
    assert accuracy(PRED, GOLD) == 4 / 6


def test_macro_and_micro_f1_by_hand():
    # a: tp 2, predicted 2, gold 3 -> 2*2/(2+3) = 0.8
    # b: tp 1, predicted 2, gold 2 -> 2/4 = 0.5
    # c: tp 1, predicted 2, gold 1 -> 2/3
    scores = f1_scores(PRED, GOLD)
    assert scores["macro_f1"] == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)
    assert scores["micro_f1"] == pytest.approx(4 / 6)  # one label per example: equals accuracy


def test_matthews_correlation_binary_by_hand():
    # tp 2 (1,1), tn 1 (0,0), fp 1 (pred 1, gold 0), fn 1: (2*1 - 1*1) / sqrt(3*3*2*2) = 1/6
    gold = [1, 1, 1, 0, 0]
    pred = [1, 1, 0, 1, 0]
    assert matthews_correlation(pred, gold) == pytest.approx(1 / 6)


def test_matthews_correlation_multiclass_by_hand():
    # s = 6, c = 4; predicted counts a2 b2 c2, gold a3 b2 c1
    # (4*6 - (2*3 + 2*2 + 2*1)) / sqrt((36 - 12) * (36 - 14)) = 12 / sqrt(24 * 22)
    assert matthews_correlation(PRED, GOLD) == pytest.approx(12 / math.sqrt(24 * 22))


def test_matthews_correlation_is_zero_for_a_constant_prediction():
    assert matthews_correlation([1, 1, 1], [0, 1, 1]) == 0.0


def test_pearson_by_hand():
    # x - mean = (-1, 0, 1), y - mean = (-2, 1, 1): cov 3, |dx| sqrt 2, |dy| sqrt 6
    assert pearson([1, 2, 3], [0, 3, 3]) == pytest.approx(3 / math.sqrt(2 * 6))


def test_tied_values_share_their_mean_rank():
    assert ranks([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]


def test_spearman_with_ties_by_hand():
    # ranks x (1, 2, 3, 4), ranks y (1, 2.5, 2.5, 4): deviations (-1.5,-.5,.5,1.5), (-1.5,0,0,1.5)
    # cov 4.5, |dx|^2 5, |dy|^2 4.5 -> 4.5 / sqrt(22.5)
    assert spearman([1, 2, 3, 4], [1, 7, 7, 9]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman([1, 2, 3], [10, 100, 1000]) == pytest.approx(1.0)  # monotone, not linear


def test_answer_normalisation_drops_case_punctuation_articles_and_extra_spaces():
    assert normalize_answer("  The Eiffel   Tower! ") == "eiffel tower"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("theory") == "theory"  # an article only as a whole word


def test_exact_match_takes_the_best_gold_answer():
    assert exact_match("the Eiffel tower", ["Paris", "Eiffel Tower."]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0.0


def test_token_f1_by_hand():
    # predicted "eiffel tower paris" vs gold "eiffel tower": common 2, p 2/3, r 1 -> 0.8
    assert token_f1("the Eiffel Tower, Paris", ["Eiffel Tower"]) == pytest.approx(0.8)
    assert token_f1("London", ["Eiffel Tower"]) == 0.0
    assert token_f1("x", ["nothing", "x"]) == 1.0


def test_bio_entities_with_types_and_spans():
    tags = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-ORG"]
    assert bio_entities(tags) == {("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 4), ("ORG", 5, 5)}


def test_entity_counts_only_when_type_and_span_match_exactly():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["B-PER", "O"]]  # PER span cut short, ORG typed PER
    # predicted 3 entities, 1 correct (LOC); gold 3 -> precision 1/3, recall 1/3, F1 1/3
    scores = entity_f1(pred, gold)
    assert scores["precision"] == pytest.approx(1 / 3)
    assert scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(1 / 3)
    assert entity_f1(gold, gold)["f1"] == 1.0


def test_a_tag_that_is_not_bio_is_refused():
    with pytest.raises(LmlabError, match="X-PER"):
        bio_entities(["X-PER"])

"""Behavioural tests (`lmlab.eval.checklist`): fake predictors with known blind spots fail exactly the
tests that probe them, a rule-based predictor that reads negation and 'but' fails none, the suite is
fixed by its seed, labels map by name; and `lmlab eval checklist` on a tiny fine-tuned run."""

import json
import math

import numpy as np
import pytest

from conftest import lmlab, one_line_error
from encoder_data import task_rows, tiny_encoder_dir, write_csv, write_jsonl
from lmlab.data.sentiment import NEGATIONS, NEGATIVE, POSITIVE
from lmlab.errors import LmlabError
from lmlab.eval.checklist import (
    CITIES,
    NAMES,
    NEW_NEGATIVE,
    NEW_POSITIVE,
    STRONG_INTENSIFIERS,
    checklist_suite,
    run_checklist,
    sentiment_labels,
)

pytestmark = pytest.mark.usefixtures("one_thread")

LABELS = ["negative", "positive"]
GOOD, BAD = set(POSITIVE + NEW_POSITIVE), set(NEGATIVE + NEW_NEGATIVE)


def _key(word: str) -> str:
    """A word's letters in order: a swap of two adjacent letters keeps it."""
    return "".join(sorted(word))


GOOD_KEYS, BAD_KEYS = {_key(w) for w in GOOD}, {_key(w) for w in BAD}
NEGATION_KEYS = {_key(n.strip()) for n in NEGATIONS}
INTENSIFIER_KEYS = {_key(w) for w in STRONG_INTENSIFIERS}


def predictor(p_positive, labels=LABELS):
    """A predictor over `labels` from a function text -> probability of positive."""
    def predict(texts):
        p = np.array([p_positive(t) for t in texts])
        columns = np.stack([p if label.lower().startswith("pos") else 1 - p for label in labels], axis=1)  # (N, 2)
        return [labels[i] for i in columns.argmax(1)], columns
    return predict


def bag_of_words(text: str) -> float:
    """Counts sentiment words and ignores everything else, negation included; no word leans negative."""
    score = sum((w in GOOD) - (w in BAD) for w in text.split())
    return 1 / (1 + math.exp(-2 * score)) if score else 0.4


def rules(text: str) -> float:
    """Reads the task's grammar: the clause after the last 'but' decides, a negation before the
    sentiment word flips it, an intensifier makes it surer; words are matched up to letter order."""
    keys = [_key(w) for w in text.split()]
    if _key("but") in keys:
        keys = keys[len(keys) - keys[::-1].index(_key("but")):]
    positive = any(k in GOOD_KEYS for k in keys) != any(k in NEGATION_KEYS for k in keys)
    sure = 0.97 if any(k in INTENSIFIER_KEYS for k in keys) else 0.9
    return sure if positive else 1 - sure


def by_name(results):
    return {r.name: r for r in results}


def test_bag_of_words_fails_every_negation_test_and_no_invariance_to_names():
    results = by_name(run_checklist(checklist_suite(40, seed=1), predictor(bag_of_words), LABELS))
    for name in ("negated positive is negative", "negated negative is positive", "negation, new vocabulary",
                 "negation flips the label"):
        assert results[name].failure_rate == 1.0, name
    for name in ("sentiment words", "sentiment words, new vocabulary", "change person names", "change locations",
                 "neutral phrases and punctuation", "intensifiers keep the label"):
        assert results[name].failures == 0, name
    assert 0 < results["the clause after 'but' decides"].failure_rate < 1


def test_bag_of_words_fails_typos_exactly_where_they_hit_a_positive_word():
    suite = checklist_suite(60, seed=2)
    typos = next(t for t in suite if t.name == "typos")
    hit = [c for c in typos.cases if any(w in GOOD and w not in c.perturbed.split() for w in c.text.split())]
    result = by_name(run_checklist(suite, predictor(bag_of_words), LABELS))["typos"]
    assert result.failures == len(hit) > 0
    for example in result.examples:
        before, after = example["predictions"]
        assert before["label"] == "positive" and after["label"] == "negative"


def test_rule_based_predictor_fails_nothing():
    results = run_checklist(checklist_suite(60, seed=3), predictor(rules), LABELS)
    assert {r.name: r.failures for r in results} == {r.name: 0 for r in results}
    assert all(r.examples == () for r in results)


def test_a_predictor_that_always_says_positive_fails_half_the_functionality_tests_and_flips_nothing():
    results = by_name(run_checklist(checklist_suite(50, seed=4), predictor(lambda t: 0.8), LABELS))
    assert results["negated positive is negative"].failure_rate == 1.0
    assert results["negated negative is positive"].failures == 0
    assert results["negation flips the label"].failure_rate == 1.0
    assert results["typos"].failures == 0
    example = results["negated positive is negative"].examples[0]
    assert example["expected"] == "negative" and example["predictions"][0]["label"] == "positive"


@pytest.mark.parametrize("drop, failure_rate", [(0.25, 0.0), (0.15, 1.0)])
def test_negation_without_a_flip_passes_only_when_it_lowers_the_label_probability_by_the_margin(drop, failure_rate):
    def hedged(text: str) -> float:  # the word's side, only less sure under negation
        sure = 0.9 - drop * any(n.strip() in text.split() for n in NEGATIONS)
        return sure if any(w in GOOD for w in text.split()) else 1 - sure

    results = by_name(run_checklist(checklist_suite(30, seed=6), predictor(hedged), LABELS))
    assert results["negation flips the label"].failure_rate == failure_rate
    assert results["negated positive is negative"].failure_rate == 1.0


def test_an_intensifier_that_makes_the_predictor_unsure_fails_the_directional_test():
    def unsure(text: str) -> float:  # rules, but an intensifier pulls the probability towards 0.5
        p = rules(text)
        return 0.5 + (p - 0.5) / 4 if any(_key(w) in INTENSIFIER_KEYS for w in text.split()) else p

    results = by_name(run_checklist(checklist_suite(30, seed=6), predictor(unsure), LABELS))
    assert results["intensifiers keep the label"].failure_rate == 1.0
    assert results["negation flips the label"].failures == 0


def test_failures_keep_three_examples_with_both_predictions():
    result = by_name(run_checklist(checklist_suite(30, seed=5), predictor(bag_of_words), LABELS))[
        "negation flips the label"]
    assert result.failures == 30 and len(result.examples) == 3
    for example in result.examples:
        before, after = example["predictions"]
        assert after["text"] != before["text"] and after["p_positive"] == before["p_positive"]


def test_the_suite_is_fixed_by_its_seed_and_full_sized():
    first, again, other = checklist_suite(25, seed=7), checklist_suite(25, seed=7), checklist_suite(25, seed=8)
    assert [t.cases for t in first] == [t.cases for t in again]
    assert [t.cases for t in first] != [t.cases for t in other]
    assert all(len(t.cases) == 25 for t in first)
    assert {t.kind for t in first} == {"MFT", "INV", "DIR"}


def test_perturbations_change_only_what_they_say():
    suite = {t.name: t for t in checklist_suite(40, seed=9)}
    for case in suite["typos"].cases:
        changed = [(a, b) for a, b in zip(case.text.split(), case.perturbed.split()) if a != b]
        assert len(changed) == 1 and _key(changed[0][0]) == _key(changed[0][1])
    for name, fillers in (("change person names", NAMES), ("change locations", CITIES)):
        for case in suite[name].cases:
            changed = [(a, b) for a, b in zip(case.text.split(), case.perturbed.split()) if a != b]
            assert len(changed) == 1 and {*changed[0]} <= set(fillers)


def test_label_order_and_spelling_of_the_run_do_not_matter():
    suite = checklist_suite(20, seed=11)
    plain = run_checklist(suite, predictor(bag_of_words), LABELS)
    flipped = run_checklist(suite, predictor(bag_of_words, ["POS", "NEG"]), ["POS", "NEG"])
    assert plain == flipped
    assert sentiment_labels(["neg", "pos"]) == {"positive": "pos", "negative": "neg"}


@pytest.mark.parametrize("labels", [["spam", "ham"], ["negative", "neutral", "positive"], ["positive", "pos"], []])
def test_labels_that_are_not_a_sentiment_pair_are_refused(labels):
    with pytest.raises(LmlabError, match="needs a sentiment classifier with labels positive and negative"):
        sentiment_labels(labels)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny encoder fine-tuned for one epoch on twelve pos/neg sentences."""
    root = tmp_path_factory.mktemp("checklist")
    data = write_jsonl(root / "train.jsonl", task_rows("classify"))
    assert lmlab("finetune", "--model", tiny_encoder_dir(root / "enc"), "--task", "classify", "--data", data,
                 "--out", root / "run", "--epochs", "1", "--batch-size", "4", "--max-length", "64") == 0
    return root


def test_cli_json_has_every_test_with_its_counts(tiny_run, capsys):
    capsys.readouterr()
    assert lmlab("eval", "checklist", "--model", tiny_run / "run", "--cases", "6", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cases_per_test"] == 6 and len(report["tests"]) == len(checklist_suite(6))
    for test in report["tests"]:
        assert test["cases"] == 6 and 0 <= test["failures"] <= 6
        assert test["failure_rate"] == test["failures"] / 6
        assert len(test["examples"]) == min(3, test["failures"])
        assert test["type"] in ("MFT", "INV", "DIR") and test["capability"]


def test_cli_table_has_a_line_per_test(tiny_run, capsys):
    capsys.readouterr()
    assert lmlab("eval", "checklist", "--model", tiny_run / "run", "--cases", "3") == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + len(checklist_suite(3)) + 1
    assert out[-1].endswith("p+ = probability of positive") and "of 36 cases failed" in out[-1]


def test_cli_refuses_a_classifier_without_sentiment_labels(tiny_run, tmp_path, capsys):
    data = write_csv(tmp_path / "spam.csv", ["text,label"] + ["the movie was good,ham", "buy now,spam"] * 2)
    assert lmlab("finetune", "--model", tiny_run / "enc", "--task", "classify", "--data", data, "--eval", data,
                 "--out", tmp_path / "run", "--epochs", "1", "--max-length", "16") == 0
    capsys.readouterr()
    assert lmlab("eval", "checklist", "--model", tmp_path / "run", "--json") == 2
    one_line_error(capsys, "labels positive and negative", "--model has labels")


def test_cli_refuses_zero_cases(tiny_run, capsys):
    assert lmlab("eval", "checklist", "--model", tiny_run / "run", "--cases", "0") == 2
    one_line_error(capsys, "--cases 0", "between 1 and")

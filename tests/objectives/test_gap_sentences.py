"""Pegasus gap sentences: the principal sentence is the one that overlaps the rest most; the inputs
with the masks replaced by the targets' sentences rebuild the document; the number of gaps follows
the ratio; "lead" and "random" pick what they say. Sentence splitting loses nothing."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmlab.errors import LmlabError
from lmlab.objectives.gap_sentences import gap_sentences, rouge1_f1, sentence_scores
from lmlab.objectives.sentences import split_sentences

MASK = 0  # documents use ids 1..99


def rebuild(inputs: list[int], targets: list[int], picked: list[list[int]]) -> list[int]:
    """Replace each mask in the inputs by the next picked sentence (checking they make the targets)."""
    assert [t for s in picked for t in s] == targets
    gaps = iter(picked)
    return [t for token in inputs for t in (next(gaps) if token == MASK else [token])]


def test_rouge1_f1_is_the_harmonic_mean_of_clipped_unigram_precision_and_recall():
    candidate, reference = [1, 1, 2, 5], [1, 3, 2, 2, 4, 6]
    overlap = 2  # one 1 (clipped to the reference's single 1) and one 2 (clipped to the candidate's single 2)
    precision, recall = overlap / len(candidate), overlap / len(reference)
    assert rouge1_f1(candidate, reference) == pytest.approx(2 * precision * recall / (precision + recall))
    assert rouge1_f1([7, 8], [9]) == 0.0 and rouge1_f1([], [1]) == 0.0


def test_the_principal_sentence_is_the_one_overlapping_the_rest_most():
    document = [[10, 11, 12, 99],   # about topic A
                [20, 21, 22, 99],   # about topic B
                [10, 20, 30, 99],   # mentions A, B and C: it summarises the others
                [30, 31, 32, 99],   # about topic C
                [40, 41, 42, 43]]   # off topic
    scores = sentence_scores(document)
    assert max(range(5), key=scores.__getitem__) == 2 and scores[4] < min(scores[:4])
    inputs, targets = gap_sentences(document, MASK, ratio=0.2)
    assert targets == document[2]
    assert inputs == document[0] + document[1] + [MASK] + document[3] + document[4]


def test_several_gaps_are_the_top_scored_in_document_order_and_ties_go_to_the_earlier():
    document = [[1, 2], [3, 4], [1, 3, 5], [2, 4, 6], [7, 8], [1, 3, 5]]
    # F1 = 2 overlap / (|sentence| + |rest|): [1, 2] 2*2/(2+13), [2, 4, 6] 2*2/(3+12), [1, 3, 5] 2*3/(3+12)
    assert sentence_scores(document) == pytest.approx([4 / 15, 4 / 15, 6 / 15, 4 / 15, 0.0, 6 / 15])
    inputs, targets = gap_sentences(document, MASK, ratio=0.5)  # 3 gaps: both [1, 3, 5], then the first 4/15
    assert targets == [1, 2] + [1, 3, 5] + [1, 3, 5]
    assert inputs == [MASK, 3, 4, MASK, 2, 4, 6, 7, 8, MASK]


documents = st.lists(st.lists(st.integers(1, 99), min_size=1, max_size=8), min_size=1, max_size=20)


@settings(max_examples=150, deadline=None)
@given(documents)
def test_each_score_is_rouge1_f1_against_the_other_sentences_joined(sentences):
    rests = [[t for j, other in enumerate(sentences) if j != i for t in other] for i in range(len(sentences))]
    assert sentence_scores(sentences) == pytest.approx([rouge1_f1(s, r) for s, r in zip(sentences, rests)])


@settings(max_examples=150, deadline=None)
@given(documents, st.floats(0.01, 1.0), st.sampled_from(["principal", "lead", "random"]), st.integers(0, 2**32 - 1))
def test_inputs_and_targets_rebuild_the_document_with_the_asked_number_of_gaps(sentences, ratio, strategy, seed):
    original = [list(s) for s in sentences]
    inputs, targets = gap_sentences(sentences, MASK, ratio, strategy, random.Random(seed))
    assert sentences == original
    n_gaps = inputs.count(MASK)
    assert n_gaps == max(1, round(ratio * len(sentences)))
    position, chosen = 0, []  # which sentences were picked: walk the inputs sentence by sentence
    for sentence in sentences:
        if inputs[position] == MASK:
            chosen.append(sentence)
            position += 1
        else:
            position += len(sentence)
    assert position == len(inputs)
    assert rebuild(inputs, targets, chosen) == [t for s in sentences for t in s]


def test_lead_takes_the_first_sentences():
    document = [[i, i + 1] for i in range(1, 20, 2)]
    inputs, targets = gap_sentences(document, MASK, ratio=0.3, strategy="lead")
    assert targets == document[0] + document[1] + document[2]
    assert inputs[:3] == [MASK] * 3


def test_random_follows_the_rng_and_needs_one():
    document = [[i] for i in range(1, 31)]
    a = gap_sentences(document, MASK, strategy="random", rng=random.Random(1))
    assert a == gap_sentences(document, MASK, strategy="random", rng=random.Random(1))
    assert a != gap_sentences(document, MASK, strategy="random", rng=random.Random(2))
    with pytest.raises(LmlabError, match="needs an rng"):
        gap_sentences(document, MASK, strategy="random")


@pytest.mark.parametrize("kwargs, message", [({"strategy": "best"}, "unknown gap-sentence strategy"),
                                             ({"ratio": 0.0}, "must be in"), ({"ratio": 1.5}, "must be in")])
def test_bad_settings_are_a_clear_error(kwargs, message):
    with pytest.raises(LmlabError, match=message):
        gap_sentences([[1, 2], [3]], MASK, **kwargs)


def test_an_empty_document_is_a_clear_error():
    with pytest.raises(LmlabError, match="at least one sentence"):
        gap_sentences([], MASK)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=60))
def test_split_sentences_loses_nothing_and_cuts_right_after_each_end(tokens):
    ends = {0, 5}
    sentences = split_sentences(tokens, ends)
    assert [t for s in sentences for t in s] == tokens
    assert all(s and all(t not in ends for t in s[:-1]) for s in sentences)
    assert all(s[-1] in ends for s in sentences[:-1])

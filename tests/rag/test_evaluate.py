"""The invented facts and the scores of `lmlab rag eval`: every answer is in its person's document and nowhere
else in the same role, the same seed gives the same set, recall@k counts a passage of the right document that
holds the answer, and an answer is found in a reply only as a whole word."""

from lmlab.data.invented_facts import QUESTIONS, invented_facts
from lmlab.rag.evaluate import answer_in, recall_at, relevant
from lmlab.rag.passages import Passage
from lmlab.rag.retrieve import Hit


def test_invented_facts_are_reproducible_and_each_answer_is_in_its_document():
    documents, facts = invented_facts(8, seed=3)
    assert (documents, facts) == invented_facts(8, seed=3) and documents != invented_facts(8, seed=4)[0]
    assert len(documents) == 8 and len(facts) == 32 and {f.relation for f in facts} == set(QUESTIONS)
    texts = dict(documents)
    assert all(f.answer in texts[f.source] and f.subject in f.question for f in facts)
    for relation in QUESTIONS:  # every person has their own town, year and dog's name
        answers = [f.answer for f in facts if f.relation == relation]
        assert relation == "count" or len(set(answers)) == len(answers)


def test_recall_counts_a_passage_of_the_right_document_that_holds_the_answer():
    _, facts = invented_facts(2)
    fact = next(f for f in facts if f.relation == "town")
    right = Hit(Passage(f"{fact.subject} was born in {fact.answer} in 1800.", fact.source, 0), 0, 0.9)
    same_document_other_fact = Hit(Passage(f"{fact.subject} had a dog.", fact.source, 1), 1, 0.8)
    other_document = Hit(Passage(f"Someone was born in {fact.answer}.", "other.txt", 0), 2, 0.7)
    assert relevant(right, fact) and not relevant(same_document_other_fact, fact)
    assert not relevant(other_document, fact)
    hits = [[other_document, same_document_other_fact, right]]
    assert [recall_at(hits, [fact], k) for k in (1, 2, 3)] == [0.0, 0.0, 1.0]


def test_an_answer_is_found_only_as_a_whole_word():
    assert answer_in("Goford", "He was born in goford, a town.") and answer_in("88", "built 88 barns")
    assert not answer_in("8", "in 1800") and not answer_in("Gof", "Goford")

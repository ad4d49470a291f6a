"""The written-out-numbers task and its corpus: correct words, leak-free splits, deterministic."""

import random
import re

import pytest

from lmlab.data.corpora import EMBEDDED, load_corpus
from lmlab.data.number_words import number_corpus, number_form, number_task, number_words
from lmlab.data.pair_tasks import make_task
from lmlab.data.pairs import TaskSizes
from lmlab.errors import LmlabError

SMALL = TaskSizes(train=500, validation=100, test=100)


@pytest.mark.parametrize("n, british, plain", [
    (0, "zero", "zero"), (13, "thirteen", "thirteen"), (40, "forty", "forty"), (99, "ninety-nine", "ninety-nine"),
    (100, "one hundred", "one hundred"), (312, "three hundred and twelve", "three hundred twelve"),
    (1005, "one thousand and five", "one thousand five"), (2020, "two thousand and twenty", "two thousand twenty"),
    (9999, "nine thousand nine hundred and ninety-nine", "nine thousand nine hundred ninety-nine"),
    (123456, "one hundred and twenty-three thousand four hundred and fifty-six",
     "one hundred twenty-three thousand four hundred fifty-six"),
])
def test_numbers_are_written_out_with_and_without_the_british_and(n, british, plain):
    assert number_words(n) == british and number_words(n, british_and=False) == plain


def test_numbers_outside_the_writable_range_are_refused():
    with pytest.raises(LmlabError, match="outside 0..999999"):
        number_words(1_000_000)


def test_splits_share_no_number_and_each_source_spells_its_target():
    splits = number_task(0, SMALL)
    train, val, test = ({t for _, t in pairs} for pairs in (splits.train, splits.validation, splits.test))
    assert not train & val and not train & test and not val & test
    words = {number_words(n): str(n) for n in range(10000)} | {number_words(n, False): str(n) for n in range(10000)}
    for source, target in splits.train + splits.test:
        assert words[source[0].lower() + source[1:]] == target


def test_same_seed_gives_same_pairs_and_the_task_is_registered():
    assert number_task(3, SMALL) == make_task("numbers", 3, SMALL) and number_task(3, SMALL) != number_task(4, SMALL)


def test_corpus_writes_each_count_in_words_or_in_digits_never_both():
    documents = number_corpus(50, seed=1)
    assert documents == number_corpus(50, seed=1) and "numbers" in EMBEDDED
    sentences = [s for doc in documents for s in re.split(r"(?<=\.) ", doc)]
    with_digits = [s for s in sentences if re.search(r"\d", s)]
    assert 0.3 < len(with_digits) / len(sentences) < 0.7
    assert not any(w in s for s in with_digits for w in ("hundred", "thousand", "twenty"))
    assert load_corpus("numbers")[:3] == number_corpus(3, seed=0)


def test_a_number_form_reads_back_to_its_number():
    rng = random.Random(0)
    assert number_form(312, rng).lower() in ("three hundred and twelve", "three hundred twelve")

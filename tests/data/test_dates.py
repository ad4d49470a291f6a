"""The generated source -> target tasks and the character vocabulary: deterministic, leak-free, correct answers."""

import datetime
import random
import re

import pytest

from lmlab.data.char_vocab import BOS, EOS, PAD, SPECIALS, UNK, CharVocab
from lmlab.data.dates import FIRST_DAY, FORMS, LAST_DAY, MONTHS, WEEKDAYS, date_form, date_task, ordinal
from lmlab.data.digits import reverse_task
from lmlab.data.pair_tasks import make_task
from lmlab.data.pairs import TaskSizes
from lmlab.errors import LmlabError

SMALL = TaskSizes(train=2000, validation=300, test=300)


def test_same_seed_gives_same_pairs_and_another_seed_others():
    assert date_task(3, SMALL) == date_task(3, SMALL)
    assert date_task(3, SMALL).train != date_task(4, SMALL).train


def test_splits_share_no_date():
    splits = date_task(0, SMALL)
    train, val, test = ({t for _, t in pairs} for pairs in (splits.train, splits.validation, splits.test))
    assert not train & val and not train & test and not val & test
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (2000, 300, 300)


def test_targets_are_iso_dates_in_range():
    for _, target in date_task(1, SMALL).train:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", target)
        assert FIRST_DAY <= datetime.date.fromisoformat(target) <= LAST_DAY


def test_every_source_writes_its_target_date():
    """Day, month (name or number) and year (4 or 2 digits) of the target are in the source, and a
    weekday, when written, is the date's own."""
    for source, target in date_task(2, SMALL).train:
        d = datetime.date.fromisoformat(target)
        text = source.lower()
        numbers = [int(n) for n in re.findall(r"\d+", text)]
        assert d.day in numbers or f"{d.day:02d}" in text, source
        assert MONTHS[d.month - 1][:3].lower() in text or d.month in numbers or f"{d.month:02d}" in text, source
        assert str(d.year) in text or f"{d.year % 100:02d}" in text, source
        named = [w for w in WEEKDAYS if w[:3].lower() in text]
        assert named in ([], [WEEKDAYS[d.weekday()]]), source


def test_one_date_has_many_surface_forms():
    rng = random.Random(0)
    forms = {date_form(datetime.date(1998, 3, 3), rng) for _ in range(300)}
    assert len(forms) >= 2 * len(FORMS)
    assert {"3rd of March 1998", "March 3, 98", "03/03/1998", "Tuesday 3 Mar 1998"} <= forms


@pytest.mark.parametrize("n,expected", [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"),
                                        (12, "12th"), (13, "13th"), (21, "21st"), (22, "22nd"), (31, "31st")])
def test_ordinal_suffixes(n, expected):
    assert ordinal(n) == expected


def test_reverse_task_targets_are_reversed_sources_and_splits_disjoint():
    splits = reverse_task(0, SMALL)
    assert all(t == s[::-1] and len(s) == 4 for s, t in splits.train)
    train = {s for s, _ in splits.train}
    assert not train & {s for s, _ in splits.test} and not train & {s for s, _ in splits.validation}


def test_unknown_task_or_bad_sizes_are_refused():
    with pytest.raises(LmlabError, match="unknown task 'nope'"):
        make_task("nope")
    with pytest.raises(LmlabError, match="at least one pair"):
        TaskSizes(train=0)


def test_vocab_puts_specials_first_and_round_trips():
    vocab = CharVocab.from_texts(["March 3", "1998"])
    assert (PAD, BOS, EOS, UNK) == (0, 1, 2, 3) and [vocab.token(i) for i in range(4)] == list(SPECIALS)
    assert len(vocab) == 4 + len(set("March 31998"))
    ids = vocab.encode("3 March")
    assert ids[-1] == EOS and vocab.decode(ids) == "3 March"
    assert vocab.encode("Mz", eos=False) == [vocab.index["M"], UNK]
    assert vocab.decode([vocab.index["a"], EOS, vocab.index["b"] if "b" in vocab.index else UNK]) == "a"


def test_vocab_check_names_unknown_characters_and_refuses_empty_text():
    vocab = CharVocab.from_texts(["0123"])
    with pytest.raises(LmlabError, match="'ax'"):
        vocab.check("1x2a")
    with pytest.raises(LmlabError, match="empty"):
        vocab.check("")
    vocab.check("3210")

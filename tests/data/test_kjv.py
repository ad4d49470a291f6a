"""The kjv corpus: real English from Debian's bible-kjv package, one document per book, held out by whole books."""

import os
import shutil

import pytest

from lmlab.data import kjv
from lmlab.data.corpora import load_corpus
from lmlab.errors import LmlabError


@pytest.fixture
def bible_program():
    """CI installs bible-kjv (.ci/run); elsewhere the tests that read the real text skip until it is installed."""
    if shutil.which(kjv.PROGRAM) is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's bible-kjv (apt-get install bible-kjv)")
        pytest.skip("needs Debian's bible-kjv: apt-get install bible-kjv")


def test_the_program_output_becomes_one_document_per_book(monkeypatch):
    books = [f"X{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(len(kjv.BOOKS))]  # Xaa, Xab, ...: letters only
    lines = [f"{book}1:{verse} Verse {verse} of {book}." for book in books for verse in (1, 2)]
    lines.insert(1, "   and the rest of the first verse, wrapped")
    parsed = kjv._books("\n".join(lines))
    assert list(parsed) == list(kjv.BOOKS)
    assert parsed["Genesis"] == "Verse 1 of Xaa. and the rest of the first verse, wrapped\nVerse 2 of Xaa.\n"
    with pytest.raises(LmlabError, match="printed 2 books, not the Bible's 66"):
        kjv._books("Ge1:1 a\nExo1:1 b")


def test_without_the_program_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(kjv.shutil, "which", lambda name: None)
    with pytest.raises(LmlabError, match="apt-get install bible-kjv"):
        load_corpus("kjv")


def test_the_held_out_books_are_whole_and_never_trained_on(bible_program):
    train, held_out = load_corpus("kjv"), load_corpus("kjv-held-out")
    assert len(train) == 64 and len(held_out) == 2
    assert held_out[0].startswith("Now it came to pass in the days of Ahasuerus")  # Esther 1:1
    assert held_out[1].startswith("The book of the generation of Jesus Christ")  # Matthew 1:1
    assert train[0].startswith("In the beginning God created the heaven and the earth.\n")
    assert not set(held_out) & set(train)
    assert 3_900_000 < sum(map(len, train)) < 4_100_000  # every verse, no references, nothing twice

"""Real English with no model-hub download: the King James Bible, as Debian's `bible-kjv` package ships it.

The King James Version (1611) is in the public domain. Debian packages it in a compressed form that its own
`bible` program reads (`apt-get install bible-kjv`); lmlab runs that program once for the whole text, about
4.4 MB, in 0.1 s. Each of the 66 books is one document, its verses one per line, without their references.

The held-out split is of whole books, never interleaved lines: `kjv` is the 64 books that train, `kjv-held-out`
is Esther (narrative prose from the Old Testament) and Matthew (from the New), whose text a model trained on
`kjv` has never seen, although their names, style and vocabulary run through the rest.
"""

import os
import re
import shutil
import subprocess

from lmlab.errors import LmlabError

BOOKS = (
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth", "1 Samuel",
    "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra", "Nehemiah", "Esther", "Job",
    "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon", "Isaiah", "Jeremiah", "Lamentations", "Ezekiel",
    "Daniel", "Hosea", "Joel", "Amos", "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai",
    "Zechariah", "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
    "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "1 Thessalonians",
    "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James", "1 Peter", "2 Peter",
    "1 John", "2 John", "3 John", "Jude", "Revelation",
)
HELD_OUT = ("Esther", "Matthew")
PROGRAM = "bible"  # from Debian's bible-kjv, which depends on bible-kjv-text (the text itself)
WHOLE = "gen1:1-rev22:21"
MAX_BYTES = 16 * 2**20  # the text is 4.4 MB: anything much larger is not the KJV
_VERSE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")  # "1Sm3:4 That the LORD called Samuel: ..."


def kjv_texts(held_out: bool = False) -> list[str]:
    """The books that train (`held_out=False`, 64 documents) or the held-out ones (Esther and Matthew)."""
    books = kjv_books()
    return [text for name, text in books.items() if (name in HELD_OUT) == held_out]


def kjv_books() -> dict[str, str]:
    """Book name -> its verses, one per line, in canonical order."""
    if shutil.which(PROGRAM) is None:
        raise LmlabError("the kjv corpus is read with Debian's bible-kjv program, which is not installed: "
                         "apt-get install bible-kjv (or pass your own text to --data)")
    run = subprocess.run([PROGRAM, "-f", WHOLE], capture_output=True, timeout=60,
                         env=os.environ | {"COLUMNS": "1000000"})  # one verse per line, never wrapped
    if run.returncode != 0 or len(run.stdout) > MAX_BYTES:
        raise LmlabError(f"'{PROGRAM} -f {WHOLE}' failed (exit {run.returncode}); reinstall it: "
                         "apt-get install --reinstall bible-kjv bible-kjv-text")
    return _books(run.stdout.decode("utf-8", errors="replace"))


def _books(output: str) -> dict[str, str]:
    """The program's verse lines grouped into books, in the order they come (a line without a reference
    continues the verse before it)."""
    verses: list[list[str]] = []
    last = None
    for line in output.splitlines():
        match = _VERSE.match(line)
        if match is None:
            if verses and line.strip():
                verses[-1][-1] += " " + line.strip()
            continue
        if match[1] != last:
            verses.append([])
            last = match[1]
        verses[-1].append(match[4].strip())
    if len(verses) != len(BOOKS):
        raise LmlabError(f"'{PROGRAM}' printed {len(verses)} books, not the Bible's {len(BOOKS)}; reinstall it: "
                         "apt-get install --reinstall bible-kjv bible-kjv-text")
    return {name: "\n".join(lines) + "\n" for name, lines in zip(BOOKS, verses)}

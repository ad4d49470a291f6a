"""Probing tasks: texts whose words (or whole texts) carry labels that a linear probe tries to read
from a model's frozen hidden states.

An `Example` is a text with labelled character spans. A word-level task labels words (a probe reads
each word's state); a sentence-level task labels one span covering the whole text (a probe reads the
mean of its token states). The span's text is the unit's *type*, which the control task keys on.

Embedded tasks:
  - "python-tokens": lines of the running Python's standard library; the words are the tokens
    Python's `tokenize` gives, labelled NAME, KEYWORD, OP, NUMBER, STRING or COMMENT;
  - "sentiment": `lmlab.data.sentiment` reviews, one label (positive / negative) per review.
User JSONL: one example a line, {"words": [...], "labels": [...]} (word level, the words joined by
single spaces) or {"text": "...", "label": "..."} (sentence level), the same shape on every line.
"""

import io
import keyword
import random
import token
import tokenize
from dataclasses import dataclass
from pathlib import Path

from lmlab.data.sentiment import sentiment_examples
from lmlab.data.stdlib import stdlib_texts
from lmlab.errors import LmlabError
from lmlab.io.lines import json_objects

WORD, SENTENCE = "word", "sentence"
TASKS = ("python-tokens", "sentiment")
DEFAULT_EXAMPLES = 500  # of an embedded task
MAX_EXAMPLES = 20_000  # each is one forward pass whose states are kept for every layer
LINES_PER_FILE = 8  # python-tokens draws at most this many lines from one file, for variety
MIN_LINE_TOKENS, MAX_LINE_CHARS = 3, 160
CATEGORIES = {token.NAME: "NAME", token.OP: "OP", token.NUMBER: "NUMBER", token.STRING: "STRING",
              token.COMMENT: "COMMENT"}  # NAMEs that are keywords become KEYWORD
LAYOUT = {token.NEWLINE, token.NL, token.INDENT, token.DEDENT, token.ENDMARKER}
JSONL_HINT = 'each line must be {"words": [...], "labels": [...]} or {"text": "...", "label": "..."}'


@dataclass(frozen=True)
class Example:
    text: str
    spans: tuple[tuple[int, int], ...]  # character [start, end) of each labelled unit of `text`
    labels: tuple[str, ...]  # one per span

    def types(self) -> list[str]:
        """Each unit's text: the key of the control task's random labels."""
        return [self.text[start:end] for start, end in self.spans]


@dataclass(frozen=True)
class ProbingTask:
    name: str
    level: str  # WORD or SENTENCE
    examples: tuple[Example, ...]


def probing_task(name: str, n: int | None, seed: int) -> ProbingTask:
    """The embedded task `name` with `n` examples drawn with `seed`, or the JSONL file `name` (its
    first `n` examples, all when `n` is None)."""
    if n is not None and not 1 <= n <= MAX_EXAMPLES:
        raise LmlabError(f"--examples {n} must be between 1 and {MAX_EXAMPLES:,}")
    if name == "python-tokens":
        return ProbingTask(name, WORD, tuple(python_token_examples(n or DEFAULT_EXAMPLES, seed)))
    if name == "sentiment":
        reviews = sentiment_examples(n or DEFAULT_EXAMPLES, seed)
        return ProbingTask(name, SENTENCE, tuple(Example(text, ((0, len(text)),), (label,)) for text, label in reviews))
    if not Path(name).is_file():
        raise LmlabError(f"--task {name} is neither an embedded task ({', '.join(TASKS)}) nor a file; "
                         "pass one of those or a JSONL file")
    return jsonl_task(name, n)


def python_token_examples(n: int, seed: int) -> list[Example]:
    """`n` distinct lines of standard-library source labelled token by token, drawn from files in an
    order shuffled with `seed`, at most LINES_PER_FILE from each."""
    texts = stdlib_texts()
    rng = random.Random(seed)
    order = list(range(len(texts)))
    rng.shuffle(order)
    examples, seen = [], set()
    for index in order:
        lines = [line for line in python_token_lines(texts[index]) if line.text not in seen]
        for line in rng.sample(lines, min(LINES_PER_FILE, len(lines))):
            seen.add(line.text)
            examples.append(line)
        if len(examples) >= n:
            return examples[:n]
    raise LmlabError(f"the standard library gives only {len(examples)} lines to probe; lower --examples")


def python_token_lines(source: str) -> list[Example]:
    """Each line of `source` whose tokens all begin and end on it, leading indentation dropped, with
    every token labelled by category. Lines holding part of a multi-line token, or a token of another
    kind (an f-string part on Python 3.12+, an error token), are left out, as are short or long lines."""
    by_row: dict[int, list[tokenize.TokenInfo]] = {}
    spoiled = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in LAYOUT:
                continue
            (row, _), (end_row, _) = tok.start, tok.end
            if end_row != row or tok.type not in CATEGORIES:
                spoiled.update(range(row, end_row + 1))
            by_row.setdefault(row, []).append(tok)
    except (tokenize.TokenError, SyntaxError):  # a file cut short or not valid Python: nothing to trust
        return []
    lines = io.StringIO(source).readlines()  # split as tokenize's readline splits
    examples = []
    for row, tokens in by_row.items():
        line = lines[row - 1].rstrip("\r\n")
        indent = len(line) - len(line.lstrip())
        if row in spoiled or len(tokens) < MIN_LINE_TOKENS or len(line) - indent > MAX_LINE_CHARS:
            continue
        spans = tuple((tok.start[1] - indent, tok.end[1] - indent) for tok in tokens)
        examples.append(Example(line[indent:], spans, tuple(_category(tok) for tok in tokens)))
    return examples


def _category(tok: tokenize.TokenInfo) -> str:
    if tok.type == token.NAME and keyword.iskeyword(tok.string):
        return "KEYWORD"
    return CATEGORIES[tok.type]


def jsonl_task(path: str, n: int | None) -> ProbingTask:
    """The examples of the JSONL file `path` (its first `n`, else all, at most MAX_EXAMPLES), each
    line checked with a one-line error naming it."""
    examples, level = [], None
    for number, row in json_objects(path, JSONL_HINT):
        if n is not None and len(examples) == n:
            break
        if len(examples) == MAX_EXAMPLES:
            raise LmlabError(f"'{path}' has more than {MAX_EXAMPLES:,} examples; pass --examples N to probe "
                             "the first N")
        where = f"{path}:{number}"
        row_level = WORD if "words" in row else SENTENCE if "text" in row else None
        if row_level is None:
            raise LmlabError(f"{where} has neither \"words\" nor \"text\"; {JSONL_HINT}")
        if level not in (None, row_level):
            raise LmlabError(f"{where} is a {row_level}-level example but earlier lines are {level}-level; "
                             "use one shape in the whole file")
        level = row_level
        examples.append(_word_example(row, where) if level == WORD else _sentence_example(row, where))
    if not examples:
        raise LmlabError(f"'{path}' holds no examples; {JSONL_HINT}")
    return ProbingTask(Path(path).name, level, tuple(examples))


def _word_example(row: dict, where: str) -> Example:
    words, labels = row.get("words"), row.get("labels")
    if not isinstance(words, list) or not words or not all(isinstance(w, str) and w.strip() for w in words):
        raise LmlabError(f"{where}: \"words\" must be a non-empty list of non-blank strings")
    if not isinstance(labels, list) or len(labels) != len(words):
        raise LmlabError(f"{where}: \"labels\" must be a list with one label per word ({len(words)})")
    spans, start = [], 0
    for word in words:
        spans.append((start, start + len(word)))
        start += len(word) + 1
    return Example(" ".join(words), tuple(spans), tuple(_label(label, where) for label in labels))


def _sentence_example(row: dict, where: str) -> Example:
    text = row["text"]
    if not isinstance(text, str) or not text.strip():
        raise LmlabError(f"{where}: \"text\" must be a non-blank string")
    if "label" not in row:
        raise LmlabError(f"{where} has no \"label\"; {JSONL_HINT}")
    return Example(text, ((0, len(text)),), (_label(row["label"], where),))


def _label(label, where: str) -> str:
    """A label as a string: strings and integers are labels, anything else is refused."""
    if isinstance(label, bool) or not isinstance(label, (str, int)) or label == "":
        raise LmlabError(f"{where}: label {label!r} must be a non-empty string or an integer")
    return str(label)

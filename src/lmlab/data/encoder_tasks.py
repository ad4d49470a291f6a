"""The six encoder fine-tuning tasks and their examples, read from CSV/JSONL rows or generated.

Every example is (text, second part, target), read from three columns whose default names depend
on the task (`--text-column`, `--pair-column`, `--label-column` rename them):

  task      text column        second part                       target (label column)
  classify  text               -                                 label: any string
  pair      text               text_pair: the second sentence    label: any string
  regress   text               text_pair, optional               label: a number
  tag       tokens: words      -                                 tags: one BIO tag per word
  qa        question           context                           answer: a span of the context
  choice    question           choices: the K candidate answers  label: index of the right one

In CSV, `tokens` and `tags` are space-separated and `choices` are separated by " | "; in JSONL
they are lists. A QA row may give the answer's character offset in `answer_start`, else its
first occurrence in the context is used. `--data sentiment` is the embedded task (`data.sentiment`).
"""

import math
from dataclasses import dataclass
from pathlib import Path

from lmlab.data.sentiment import sentiment_splits
from lmlab.data.table_files import read_rows
from lmlab.errors import LmlabError

TASKS = ("classify", "pair", "regress", "tag", "qa", "choice")
EMBEDDED_TASKS = {"sentiment": "classify"}  # --data name -> the task it is
CHOICE_SEPARATOR = " | "


@dataclass(frozen=True)
class Columns:
    text: str
    pair: str | None  # None: the task reads one text
    label: str


DEFAULT_COLUMNS = {
    "classify": Columns("text", None, "label"),
    "pair": Columns("text", "text_pair", "label"),
    "regress": Columns("text", "text_pair", "label"),
    "tag": Columns("tokens", None, "tags"),
    "qa": Columns("question", "context", "answer"),
    "choice": Columns("question", "choices", "label"),
}
OPTIONAL_PAIR = {"regress"}  # tasks whose second text may be missing (single-sentence regression)
NAMED_LABELS = {"classify", "pair", "tag"}  # tasks whose head has one output per label (or tag) name


@dataclass(frozen=True)
class Example:
    """One example: `text` (words for tag), `pair` (second text, QA context or the choices) and
    `target` (label name, score, tags, answer text or choice index); `line` says where it came from."""

    text: str | list[str]
    pair: str | list[str] | None
    target: str | float | list[str] | int | None  # None: unknown (an example to predict)
    line: int = 0
    answer_start: int | None = None  # qa: the answer's character offset in the context


def read_examples(path: str | Path, task: str, columns: Columns) -> list[Example]:
    """The examples of a CSV/JSONL file for `task`; a missing column or a bad value names the line."""
    return [_example(path, line, row, task, columns) for line, row in read_rows(path)]


def embedded_examples(name: str, seed: int = 0) -> tuple[list[Example], list[Example]]:
    """(training, evaluation) examples of an embedded task."""
    train, evaluation = sentiment_splits(seed=seed)
    return ([Example(text, None, label, i + 1) for i, (text, label) in enumerate(train)],
            [Example(text, None, label, i + 1) for i, (text, label) in enumerate(evaluation)])


def _example(path, line: int, row: dict, task: str, columns: Columns) -> Example:
    def column(name: str, optional: bool = False):
        if name not in row:
            if optional:
                return None
            raise LmlabError(f"{path}:{line} has no column '{name}' (columns: {', '.join(map(str, row))}); "
                             f"pass the right one with --{_flag(name, columns)}-column")
        return row[name]

    text, target = column(columns.text), column(columns.label)
    pair = column(columns.pair, optional=task in OPTIONAL_PAIR) if columns.pair else None
    if task in ("classify", "pair"):
        return Example(_text(path, line, text), _text(path, line, pair) if pair is not None else None,
                       str(target), line)
    if task == "regress":
        return Example(_text(path, line, text), _text(path, line, pair) if pair else None,
                       _number(path, line, target), line)
    if task == "tag":
        words, tags = _words(path, line, text), _words(path, line, target)
        if len(words) != len(tags):
            raise LmlabError(f"{path}:{line} has {len(words)} words but {len(tags)} tags; give one tag per word")
        return Example(words, None, tags, line)
    if task == "qa":
        return _qa_example(path, line, row, _text(path, line, text), _text(path, line, pair), str(target))
    choices = _choices(path, line, pair)
    index = _number(path, line, target)
    if index != int(index) or not 0 <= index < len(choices):
        raise LmlabError(f"{path}:{line} has label {target!r}, not the index of one of its {len(choices)} choices "
                         f"(0 to {len(choices) - 1})")
    return Example(_text(path, line, text), choices, int(index), line)


def _flag(name: str, columns: Columns) -> str:
    return {columns.text: "text", columns.pair: "pair", columns.label: "label"}[name]


def _text(path, line: int, value) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise LmlabError(f"{path}:{line} holds {value!r} where a text was expected")
    return str(value)


def _number(path, line: int, value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise LmlabError(f"{path}:{line} has label {value!r}, which is not a number") from None
    if not math.isfinite(number):
        raise LmlabError(f"{path}:{line} has label {value!r}; use a finite number")
    return number


def _words(path, line: int, value) -> list[str]:
    words = value.split() if isinstance(value, str) else value
    if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
        raise LmlabError(f"{path}:{line} holds {value!r} where a list of words (or a space-separated string) "
                         "was expected")
    return words


def _choices(path, line: int, value) -> list[str]:
    choices = value.split(CHOICE_SEPARATOR) if isinstance(value, str) else value
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
        raise LmlabError(f"{path}:{line} holds {value!r} where two choices or more were expected (a list, or a "
                         f"string separated by '{CHOICE_SEPARATOR}')")
    return choices


def _qa_example(path, line: int, row: dict, question: str, context: str, answer: str) -> Example:
    start = row.get("answer_start")
    if start in (None, ""):
        start = context.find(answer)
    try:
        start = int(start)
    except (TypeError, ValueError):
        raise LmlabError(f"{path}:{line} has answer_start {start!r}, not a character offset") from None
    if not answer or start < 0 or context[start:start + len(answer)] != answer:
        raise LmlabError(f"{path}:{line}: the answer {answer!r} is not in its context"
                         f"{'' if start < 0 else f' at offset {start}'}; give a span of the context")
    return Example(question, context, answer, line, start)


def check_labels(examples: list[Example], known: list[str], task: str, path: str | Path) -> None:
    """Refuse evaluation labels (or tags) that training never saw: the head has no output for them."""
    if task not in NAMED_LABELS:
        return
    seen = set(known)
    for example in examples:
        for label in example.target if isinstance(example.target, list) else [example.target]:
            if label not in seen:
                raise LmlabError(f"{path}:{example.line} has label '{label}', which the training data does not "
                                 f"have (labels seen in training: {', '.join(known)})")


def label_names(examples: list[Example], task: str) -> list[str]:
    """The sorted label names of classification examples, or tags of tagging ones; [] for other tasks."""
    if task in ("classify", "pair"):
        return sorted({e.target for e in examples})
    if task == "tag":
        return sorted({tag for e in examples for tag in e.target})
    return []


def check_choice_counts(examples: list[Example], path: str | Path) -> None:
    """Every multiple-choice question must offer the same number of choices (they form one (B, K, T) batch)."""
    k = len(examples[0].pair)
    for example in examples:
        if len(example.pair) != k:
            raise LmlabError(f"{path}:{example.line} has {len(example.pair)} choices but line {examples[0].line} "
                             f"has {k}; give every question the same number of choices")


"""Tasks for prompting a model: questions with verifiable answers, embedded or read from JSONL.

A task is a list of `Example`s and a `template` that turns a question into the text the answer
follows (after one space). An example with `choices` is multiple choice, scored by the
log-likelihood of each choice; one without is answered by generation and graded by exact match.

Embedded tasks (generated in code, so every answer is known to be right):
  arithmetic  two- or three-step word problems on small numbers, each with a worked rationale
              ("Start with 3. 3 + 5 = 8. 8 - 2 = 6. The answer is 6.") for chain-of-thought prompts
  sentiment   short reviews, positive or negative (lmlab.data.sentiment; negation and "but" decide)
  dates       a date in one of many forms, to be written as ISO 8601 (lmlab.data.dates)
  capital     "The capital of France is" -> Paris, against 3 other capitals (lmlab.data.facts)
  language    "The official language of Japan is" -> Japanese, against 3 other languages

A JSONL file holds one kind of example per line, all of the same kind:
  {"input": "...", "target": "..."}                          generation, graded by exact match
  {"question": "...", "choices": ["..", ".."], "answer": 1}  multiple choice; answer is the index or
                                                             the text of the right choice
and either kind may carry a "rationale" (a worked solution ending "The answer is X.") for --cot.
"""

import datetime
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lmlab.data.dates import FIRST_DAY, LAST_DAY, date_form, iso
from lmlab.data.facts import RELATIONS
from lmlab.data.sentiment import LABELS, sentiment_examples
from lmlab.errors import LmlabError
from lmlab.io.lines import json_objects

TASK_SIZE = 200  # examples generated per embedded task
MAX_EXAMPLES = 100_000  # read from a JSONL file: each is at least one forward pass per shot count
FACT_CHOICES = 4
QA_TEMPLATE = "Question: {question}\nAnswer:"


@dataclass(frozen=True)
class Example:
    """One question and its answer; `choices` for multiple choice (the answer is one of them),
    `rationale` a worked solution ending in "The answer is X." (chain-of-thought demonstrations)."""

    question: str
    answer: str
    choices: tuple[str, ...] | None = None
    rationale: str | None = None

    @property
    def gold(self) -> int:
        """The index of the right choice."""
        return self.choices.index(self.answer)


@dataclass(frozen=True)
class PromptTask:
    """A named list of examples and the template ("...{question}...") the answer follows after a space."""

    name: str
    examples: tuple[Example, ...]
    template: str = QA_TEMPLATE

    @property
    def multiple_choice(self) -> bool:
        return self.examples[0].choices is not None

    @property
    def has_rationales(self) -> bool:
        return all(e.rationale for e in self.examples)

    def prompt(self, question: str) -> str:
        """The text that asks `question`; the answer follows it after one space."""
        return self.template.replace("{question}", question)


def arithmetic_task(n: int = TASK_SIZE, seed: int = 0) -> PromptTask:
    """`n` distinct word problems of two or three steps (add, take away, add packs of several) on small
    numbers, each with its rationale; no answer is negative."""
    rng = random.Random(seed)
    names = ("Tom", "Anna", "Ravi", "Mia", "Leo", "Sara", "Ken", "Lucy", "Omar", "Nina")
    items = ("apples", "marbles", "stickers", "books", "pencils", "cookies", "coins", "cards", "shells", "stamps")
    examples, seen = [], set()
    while len(examples) < n:
        name, item, value = rng.choice(names), rng.choice(items), rng.randint(2, 20)
        sentences, steps = [f"{name} has {value} {item}."], [f"Start with {value}."]
        for _ in range(rng.choice((2, 3))):
            kind = rng.randrange(3)
            if kind == 0 or value < 2:
                more = rng.randint(2, 12)
                sentences.append(f"Then {name} gets {more} more {item}.")
                steps.append(f"{value} + {more} = {value + more}.")
                value += more
            elif kind == 1:
                less = rng.randint(2, value)
                sentences.append(f"Then {name} gives away {less} {item}.")
                steps.append(f"{value} - {less} = {value - less}.")
                value -= less
            else:
                packs, size = rng.randint(2, 4), rng.randint(2, 6)
                sentences.append(f"Then {name} buys {packs} packs of {size} {item} each.")
                steps.append(f"{packs} * {size} = {packs * size}. {value} + {packs * size} = {value + packs * size}.")
                value += packs * size
        question = " ".join(sentences) + f" How many {item} does {name} have now?"
        if question not in seen:
            seen.add(question)
            examples.append(Example(question, str(value), rationale=" ".join(steps) + f" The answer is {value}."))
    return PromptTask("arithmetic", tuple(examples))


def sentiment_task(n: int = TASK_SIZE, seed: int = 0) -> PromptTask:
    """`n` reviews (half positive), multiple choice over negative / positive."""
    examples = tuple(Example(text, label, LABELS) for text, label in sentiment_examples(n, seed))
    return PromptTask("sentiment", examples, "Review: {question}\nSentiment:")


def dates_task(n: int = TASK_SIZE, seed: int = 0) -> PromptTask:
    """`n` distinct dates (1950-2049) in drawn surface forms, answered in ISO 8601."""
    rng = random.Random(seed)
    days = rng.sample(range((LAST_DAY - FIRST_DAY).days + 1), n)
    examples = []
    for day in days:
        date = FIRST_DAY + datetime.timedelta(day)
        examples.append(Example(date_form(date, rng), iso(date)))
    return PromptTask("dates", tuple(examples), "Date: {question}\nISO 8601:")


def fact_task(relation: str, seed: int = 0) -> PromptTask:
    """Every (subject, object) pair of `RELATIONS[relation]` as its causal prompt, the object against
    FACT_CHOICES - 1 other objects of the relation (drawn with `seed`, in a drawn order)."""
    rng = random.Random(seed)
    facts = RELATIONS[relation]
    objects = sorted({obj for _, obj in facts.pairs})
    examples = []
    for subject, obj in facts.pairs:
        choices = rng.sample([o for o in objects if o != obj], FACT_CHOICES - 1) + [obj]
        rng.shuffle(choices)
        examples.append(Example(facts.causal_template.format(subject=subject), obj, tuple(choices)))
    return PromptTask(relation, tuple(examples), "{question}")


TASKS: dict[str, Callable[[], PromptTask]] = {
    "arithmetic": arithmetic_task,
    "sentiment": sentiment_task,
    "dates": dates_task,
    "capital": lambda: fact_task("capital"),
    "language": lambda: fact_task("language"),
}


def load_task(name_or_path: str) -> PromptTask:
    """An embedded task by name (TASKS), else the JSONL file at `name_or_path`."""
    if name_or_path in TASKS:
        return TASKS[name_or_path]()
    if not Path(name_or_path).is_file():
        raise LmlabError(f"--data {name_or_path} is neither an embedded task ({', '.join(TASKS)}) nor a file; "
                         "pass a task name or a JSONL file")
    return jsonl_task(name_or_path)


GENERATION_KEYS, CHOICE_KEYS = {"input", "target"}, {"question", "choices", "answer"}


def jsonl_task(path: str | Path) -> PromptTask:
    """The examples of a JSONL file (see the module docstring), checked line by line: a bad line is a
    one-line error naming it."""
    hint = 'each line must be {"input", "target"} or {"question", "choices", "answer"}'
    examples, kind = [], None
    for number, record in json_objects(path, hint):
        where = f"{path}:{number}"
        keys = set(record) - {"rationale"}
        line_kind = "generation" if keys == GENERATION_KEYS else "choice" if keys == CHOICE_KEYS else None
        if line_kind is None:
            raise LmlabError(f"{where} has the keys {sorted(record)}; {hint} (and optionally \"rationale\")")
        if kind is not None and line_kind != kind:
            raise LmlabError(f"{where} mixes multiple-choice and generation lines; keep one kind per file")
        kind = line_kind
        rationale = _text(record, "rationale", where) if "rationale" in record else None
        if kind == "generation":
            target = _text(record, "target", where)
            if "\n" in target:
                raise LmlabError(f"{where}: the target holds a line break, where generation stops; write it on "
                                 "one line")
            examples.append(Example(_text(record, "input", where), target, rationale=rationale))
        else:
            choices = _choices(record, where)
            examples.append(Example(_text(record, "question", where), _answer(record["answer"], choices, where),
                                    choices, rationale))
        if len(examples) > MAX_EXAMPLES:
            raise LmlabError(f"{path} holds more than {MAX_EXAMPLES:,} examples, the most lmlab reads; split it")
    if not examples:
        raise LmlabError(f"{path} holds no examples; {hint}")
    return PromptTask(Path(path).stem, tuple(examples))


def _text(record: dict, key: str, where: str) -> str:
    value = record[key]
    if not isinstance(value, str) or not value.strip():
        raise LmlabError(f"{where}: \"{key}\" must be non-empty text, got {_shown(value)}")
    return value.strip()


def _choices(record: dict, where: str) -> tuple[str, ...]:
    choices = record["choices"]
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c.strip() for c in choices):
        raise LmlabError(f"{where}: \"choices\" must be a list of at least two non-empty strings, got "
                         f"{_shown(choices)}")
    choices = tuple(c.strip() for c in choices)
    if len(set(choices)) < len(choices):
        raise LmlabError(f"{where}: \"choices\" repeats a choice; make them distinct")
    return choices


def _answer(answer, choices: tuple[str, ...], where: str) -> str:
    """The right choice's text, from its index or its text."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        if not 0 <= answer < len(choices):
            raise LmlabError(f"{where}: \"answer\" {answer} is not an index of the {len(choices)} choices (0 to "
                             f"{len(choices) - 1})")
        return choices[answer]
    if isinstance(answer, str) and answer.strip() in choices:
        return answer.strip()
    raise LmlabError(f"{where}: \"answer\" {_shown(answer)} is neither a choice's index nor one of the choices")


def _shown(value) -> str:
    """A short rendering of a JSON value for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

"""Multiple-choice truthfulness questions as TruthfulQA's MC1 and MC2 tasks pose them, read from the
embedded misconceptions or from a user's JSON Lines file.

MC1 offers one true answer among false ones; MC2 offers every true and false answer. A line of the
file is either TruthfulQA's own form (its field names; labels 1 for true, 0 for false)

    {"question": "...", "mc1_targets": {"choices": [...], "labels": [1, 0, 0]},
                        "mc2_targets": {"choices": [...], "labels": [1, 1, 0, 0]}}

or the simpler {"question": "...", "true": [...], "false": [...]}, where MC1 takes the first true
answer with all the false ones and MC2 takes them all. Each question is checked when read (a bad line is
one error naming it); a file holds at most MAX_QUESTIONS questions of at most MAX_CHOICES choices.
"""

from dataclasses import dataclass
from pathlib import Path

from lmlab.data.misconceptions import MISCONCEPTIONS, Misconception
from lmlab.errors import LmlabError
from lmlab.io.lines import json_objects

PROMPTS = ("qa", "chat")  # how a question is asked: TruthfulQA's QA prompt, or through the chat template
MAX_QUESTIONS = 100_000
MAX_CHOICES = 64
FORMS = ('{"question", "mc1_targets": {"choices", "labels"}, "mc2_targets": {...}} (TruthfulQA\'s) or '
         '{"question", "true": [...], "false": [...]}')


@dataclass(frozen=True)
class TruthfulQuestion:
    """A question with its MC1 choices (exactly one labelled 1) and its MC2 choices (labels 1 true, 0 false)."""

    question: str
    mc1_choices: tuple[str, ...]
    mc1_labels: tuple[int, ...]
    mc2_choices: tuple[str, ...]
    mc2_labels: tuple[int, ...]

    @property
    def mc1_gold(self) -> int:
        """The index of MC1's one true choice (TruthfulQA puts it first)."""
        return self.mc1_labels.index(1)


def from_answers(question: str, true: tuple[str, ...], false: tuple[str, ...]) -> TruthfulQuestion:
    """MC1: the first true answer and the false ones; MC2: every answer, true ones first."""
    return TruthfulQuestion(question, (true[0], *false), (1,) + (0,) * len(false), (*true, *false),
                            (1,) * len(true) + (0,) * len(false))


def embedded_questions(misconceptions: tuple[Misconception, ...] = MISCONCEPTIONS) -> list[TruthfulQuestion]:
    """The embedded misconceptions (`data/misconceptions.py`) as MC1 / MC2 questions."""
    return [from_answers(m.question, m.true, m.false) for m in misconceptions]


def read_truthful_questions(path: str | Path) -> list[TruthfulQuestion]:
    """Every question of the JSON Lines file `path`, in either form (see the module docstring)."""
    questions = []
    for line, row in json_objects(path, f"each line needs {FORMS}"):
        if len(questions) == MAX_QUESTIONS:
            raise LmlabError(f"{path} holds more than {MAX_QUESTIONS:,} questions; split it into smaller files")
        questions.append(_question(row, f"{path}:{line}"))
    if not questions:
        raise LmlabError(f"{path} holds no questions; each line needs {FORMS}")
    return questions


def _question(row: dict, where: str) -> TruthfulQuestion:
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise LmlabError(f"{where} has no 'question' string; each line needs {FORMS}")
    if "mc1_targets" in row or "mc2_targets" in row:
        mc1 = _targets(row.get("mc1_targets"), "mc1_targets", where)
        mc2 = _targets(row.get("mc2_targets"), "mc2_targets", where)
        if mc1[1].count(1) != 1:
            raise LmlabError(f"{where}: mc1_targets must label exactly one choice 1 (the true answer), "
                             f"not {mc1[1].count(1)}")
        return TruthfulQuestion(question, *mc1, *mc2)
    true, false = (_strings(row.get(key), key, where) for key in ("true", "false"))
    _check_distinct([*true, *false], "'true' and 'false'", where)
    if len(true) + len(false) > MAX_CHOICES:
        raise LmlabError(f"{where} has {len(true) + len(false)} answers; at most {MAX_CHOICES} are scored")
    return from_answers(question, true, false)


def _targets(value, key: str, where: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(choices, labels) of one TruthfulQA targets object, checked."""
    if not isinstance(value, dict) or set(value) != {"choices", "labels"}:
        raise LmlabError(f"{where}: '{key}' must be an object with 'choices' and 'labels'; each line needs {FORMS}")
    choices, labels = value["choices"], value["labels"]
    if not isinstance(choices, list) or not 2 <= len(choices) <= MAX_CHOICES or not all(
            isinstance(c, str) and c.strip() for c in choices):
        raise LmlabError(f"{where}: '{key}.choices' must be 2 to {MAX_CHOICES} non-empty strings")
    if not isinstance(labels, list) or len(labels) != len(choices) or any(
            type(label) is not int or label not in (0, 1) for label in labels):
        raise LmlabError(f"{where}: '{key}.labels' must be one 0 or 1 per choice ({len(choices)} of them)")
    if 1 not in labels or 0 not in labels:
        raise LmlabError(f"{where}: '{key}' needs at least one true (1) and one false (0) choice")
    return tuple(choices), tuple(labels)  # a repeated choice is scored twice, as lm-eval scores it


def _check_distinct(answers: list[str], key: str, where: str) -> None:
    """Each answer once: an answer listed twice, or as both true and false, is a mistake in the file."""
    seen = set()
    for answer in answers:
        if answer in seen:
            raise LmlabError(f"{where}: {key} lists {answer!r} twice; give each answer once")
        seen.add(answer)


def _strings(value, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(s, str) and s.strip() for s in value):
        raise LmlabError(f"{where}: '{key}' must be a non-empty list of answer strings; each line needs {FORMS}")
    return tuple(value)

"""A small verifiable task, generated in code, to show SFT, reward modelling, PPO and DPO working.

The task is addition of two small numbers, answered in a fixed form:
    system: Answer in the form <answer>N</answer>.    user: What is 3 + 4?    assistant: <answer>7</answer>
A program can grade any answer, so the task supplies everything alignment needs without people:
demonstrations for SFT (`task_examples`), a reward (`reward`), preference pairs and rankings
(`preference_pairs`, `ranked_answers`) and a score for a model's answers (`score`). With operands
up to 9 (the default) there are 100 questions, few enough for a tiny model trained from scratch (a
4-layer, 128-wide GPT-2 answers about 60% right after 400 SFT steps of 32 chats); `max_operand=99`
makes a task for a pre-trained model.

The reward adds up what a grader would look for:
    0.8  the answer is right (the number in <answer> tags, or else the last number written)
    0.2  the reply is exactly <answer>N</answer>, nothing else
   -0.5  the reply rambles past 40 characters
so a perfect reply scores 1, a right number in the wrong form 0.8, a well-formed wrong one 0.2.
"""

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from lmlab.errors import LmlabError

SYSTEM = "Answer in the form <answer>N</answer>."
QUESTION = "What is {a} + {b}?"
CORRECT_REWARD = 0.8
FORMAT_REWARD = 0.2
RAMBLING_PENALTY = 0.5
MAX_CHARS = 40  # longer replies ramble: "<answer>18</answer>" has 19

_QUESTION = re.compile(r"(-?\d+)\s*\+\s*(-?\d+)")
_TAGGED = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")
_NUMBER = re.compile(r"-?\d+")


def task_prompts(n: int, seed: int = 0, max_operand: int = 9) -> list[list[dict]]:
    """n questions as chat prompts (system + user messages), drawn by `seed`; operands 0..max_operand."""
    rng = random.Random(seed)
    return [_prompt(*_operands_drawn(rng, max_operand)) for _ in range(n)]


def task_examples(n: int, seed: int = 0, max_operand: int = 9) -> list[list[dict]]:
    """n SFT demonstrations: each prompt followed by the perfect assistant reply."""
    return [[*prompt, {"role": "assistant", "content": perfect_reply(prompt)}]
            for prompt in task_prompts(n, seed, max_operand)]


def perfect_reply(prompt: str | list[dict]) -> str:
    """The reply that scores 1 on `prompt`: the right number in the asked-for form."""
    return _perfect(*_operands(prompt))


def reward(prompt: str | list[dict], completion: str) -> float:
    """The programmatic reward of `completion` as a reply to `prompt` (see the module docstring).

    `prompt` is the chat prompt (its last user message holds the question) or any text whose last
    "a + b" is the question, such as the rendered prompt or the question alone.
    """
    a, b = _operands(prompt)
    text = completion.strip()
    value = CORRECT_REWARD * (_answer(text) == a + b) + FORMAT_REWARD * (_TAGGED.fullmatch(text) is not None)
    return value - RAMBLING_PENALTY * (len(text) > MAX_CHARS)


def preference_pairs(n: int, seed: int = 0, max_operand: int = 9) -> list[tuple[list[dict], str, str]]:
    """n (prompt, chosen, rejected) triples: chosen is the perfect reply, rejected a plausible
    worse one (off by one, in the wrong form, or rambling), so reward(chosen) > reward(rejected).
    """
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        a, b = _operands_drawn(rng, max_operand)
        worse = rng.choice(_REPLIES[1:])
        pairs.append((_prompt(a, b), _perfect(a, b), worse(rng, a, b)))
    return pairs


def ranked_answers(n: int, k: int, seed: int = 0, max_operand: int = 9) -> list[tuple[list[dict], list[str]]]:
    """n (prompt, answers) rows with k answers ranked best first by strictly decreasing reward, as a
    labeller ranks K samples in InstructGPT; expand them with `losses.bradley_terry.ranked_pairs`.
    """
    if not 2 <= k <= len(_REPLIES):
        raise LmlabError(f"k={k} answers cannot be ranked on this task; pick k from 2 to {len(_REPLIES)}")
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = _operands_drawn(rng, max_operand)
        kinds = sorted(rng.sample(range(len(_REPLIES)), k))  # indices into _REPLIES, best first
        rows.append((_prompt(a, b), [_REPLIES[i](rng, a, b) for i in kinds]))
    return rows


@dataclass(frozen=True)
class TaskScore:
    reward: float  # mean reward over the prompts
    accuracy: float  # share of replies with the right number, in any form


def score(generate: Callable[[list[list[dict]]], list[str]], prompts: list[list[dict]]) -> TaskScore:
    """Grade a model on `prompts`: `generate` maps a list of chat prompts to their reply texts."""
    completions = generate(prompts)
    if len(completions) != len(prompts):
        raise LmlabError(f"generate returned {len(completions)} replies for {len(prompts)} prompts; "
                         "it must return one reply per prompt")
    rewards = [reward(p, c) for p, c in zip(prompts, completions)]
    correct = [_answer(c.strip()) == sum(_operands(p)) for p, c in zip(prompts, completions)]
    return TaskScore(reward=sum(rewards) / len(prompts), accuracy=sum(correct) / len(prompts))


def _prompt(a: int, b: int) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION.format(a=a, b=b)}]


def _operands_drawn(rng: random.Random, max_operand: int) -> tuple[int, int]:
    return rng.randint(0, max_operand), rng.randint(0, max_operand)


def _operands(prompt: str | list[dict]) -> tuple[int, int]:
    """(a, b) of the last "a + b" in the prompt text (or its last user message)."""
    if isinstance(prompt, list):
        prompt = next((m.get("content", "") for m in reversed(prompt) if m.get("role") == "user"), "")
    found = _QUESTION.findall(prompt)
    if not found:
        raise LmlabError(f"prompt {prompt!r} asks no 'a + b' question; use a prompt from lmlab.data.tasks")
    a, b = found[-1]
    return int(a), int(b)


def _answer(text: str) -> int | None:
    """The number a reply gives: the one in <answer> tags, else the last number written, else None."""
    tagged = _TAGGED.search(text)
    numbers = [tagged.group(1)] if tagged else _NUMBER.findall(text)
    return int(numbers[-1]) if numbers else None


def _perfect(a: int, b: int) -> str:
    return f"<answer>{a + b}</answer>"


def _off_by_one(rng: random.Random, a: int, b: int) -> int:
    return a + b + rng.choice([-1, 1])


# Kinds of reply, best first, with strictly decreasing reward: 1, 0.8, 0.3, 0.2, 0.
_REPLIES: list[Callable[[random.Random, int, int], str]] = [
    lambda rng, a, b: _perfect(a, b),
    lambda rng, a, b: rng.choice([f"{a + b}", f"The answer is {a + b}.", f"{a} + {b} = {a + b}"]),
    lambda rng, a, b: f"Let me think. Start at {a} and count up {b} more; that makes {a + b}. "
                      f"<answer>{a + b}</answer>",
    lambda rng, a, b: f"<answer>{_off_by_one(rng, a, b)}</answer>",
    lambda rng, a, b: rng.choice([f"{_off_by_one(rng, a, b)}", f"The answer is {_off_by_one(rng, a, b)}."]),
]

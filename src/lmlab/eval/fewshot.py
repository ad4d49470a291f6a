"""Few-shot prompting (in-context learning), chain of thought and self-consistency.

A k-shot prompt is k demonstrations (question, then its answer) and the test question, separated by
blank lines, as plain text (a chat model is prompted the same way, without its chat template):

    Review: the food was not bad           <- demonstration 1 (of k)
    Sentiment: positive

    Review: the plot was dull but ...      <- the test question; the answer follows after a space
    Sentiment:

Demonstrations are drawn with a seed from the task's other examples, never the test example itself;
the k-shot demonstrations are the first k of the same draw, so more shots only add to the prompt.
With demo_labels="random" (Min et al. 2022, "Rethinking the role of demonstrations") each
demonstration's answer is replaced by a random label: a random choice of its own choices for
multiple choice, a random other example's answer for generation.

Multiple choice is scored by log-likelihood (`acc`, `acc_norm`, see lmlab.eval.answers): the prompt
runs once and the choices share its KV cache. Generation is greedy until a line break and graded by
exact match. Chain of thought (`evaluate_cot`) shows worked rationales ("... The answer is 6.") and
reads the final answer out of the model's own chain; with samples=K > 1 it samples K chains per
question in one batch and takes the majority answer (self-consistency, Wang et al. 2023).
"""

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lmlab.errors import LmlabError
from lmlab.eval.answers import choice_hits, exact_match, extract_answer, majority
from lmlab.eval.loglikelihood import score_continuations, split_pair
from lmlab.eval.prompt_tasks import Example, PromptTask
from lmlab.generation.config import GenerationConfig
from lmlab.generation.generate import generate_batch
from lmlab.progress import progress_bar

SEPARATOR = "\n\n"  # between demonstrations
MAX_SHOTS = 64  # demonstrations drawn per test example (k-shot prompts use the first k)
DEMO_LABELS = ("gold", "random")
BATCH = 8  # prompts decoded together


@dataclass(frozen=True)
class ShotScore:
    """How a task went at one number of shots: `correct` answers (acc, or exact matches) out of
    `examples`, and for multiple choice `correct_norm` (acc_norm)."""

    shots: int
    examples: int
    correct: int
    correct_norm: int | None = None

    def as_dict(self) -> dict:
        if self.correct_norm is None:
            return {"shots": self.shots, "examples": self.examples, "correct": self.correct,
                    "exact_match": self.correct / self.examples}
        return {"shots": self.shots, "examples": self.examples, "correct": self.correct,
                "correct_norm": self.correct_norm, "acc": self.correct / self.examples,
                "acc_norm": self.correct_norm / self.examples}


@dataclass(frozen=True)
class FewshotResult:
    """One task's scores at each number of shots, for one way of prompting."""

    task: str
    mode: str  # "direct", "cot" or "self-consistency"
    demo_labels: str  # "gold" or "random"
    scores: tuple[ShotScore, ...]

    @property
    def metric(self) -> str:
        return "exact_match" if self.scores[0].correct_norm is None else "acc"

    def as_dict(self) -> dict:
        return {"task": self.task, "mode": self.mode, "demo_labels": self.demo_labels, "metric": self.metric,
                "shots": [s.as_dict() for s in self.scores]}


def demonstrations(task: PromptTask, index: int, shots: int, seed: int, demo_labels: str = "gold"
                   ) -> list[Example]:
    """The `shots` demonstrations for test example `index`: other examples (none with its question),
    the same for the same seed, answers replaced by random labels when demo_labels is "random"."""
    if demo_labels not in DEMO_LABELS:
        raise LmlabError(f"--demo-labels {demo_labels} must be one of {', '.join(DEMO_LABELS)}")
    question = task.examples[index].question
    others = [j for j, e in enumerate(task.examples) if j != index and e.question != question]
    if shots > len(others):
        raise LmlabError(f"{shots} shots need {shots} examples besides the test one; {task.name} has "
                         f"{len(others)}; ask for fewer --shots")
    drawn = random.Random(f"{seed}:{index}").sample(others, min(len(others), MAX_SHOTS))[:shots]
    if demo_labels == "gold":
        return [task.examples[j] for j in drawn]
    rng = random.Random(f"{seed}:{index}:labels")
    return [Example(task.examples[j].question, _random_label(task, j, rng), task.examples[j].choices)
            for j in drawn]


def check_shots(task: PromptTask, shots: Sequence[int]) -> None:
    """Refuse an empty list of shots, or a number the task has too few examples for (each test
    example's demonstrations come from the others)."""
    if not shots or min(shots) < 0:
        raise LmlabError(f"--shots {','.join(map(str, shots))} must list numbers of demonstrations, each 0 or more")
    if max(shots) >= len(task.examples):
        raise LmlabError(f"{max(shots)} shots need {max(shots)} examples besides the test one and {task.name} "
                         f"has {len(task.examples)} examples in all; ask for fewer --shots")


def _tests(task: PromptTask, limit: int) -> range:
    """The indices of the test examples: the task's first `limit`."""
    if limit < 1:
        raise LmlabError(f"--limit {limit} must be at least 1 (test questions asked)")
    return range(min(limit, len(task.examples)))


def _random_label(task: PromptTask, j: int, rng: random.Random) -> str:
    """A label drawn for example j: one of its choices, or another example's answer."""
    if task.examples[j].choices is not None:
        return rng.choice(task.examples[j].choices)
    other = rng.randrange(len(task.examples) - 1)
    return task.examples[other + (other >= j)].answer


def build_prompt(task: PromptTask, demos: Sequence[Example], question: str, cot: bool = False) -> str:
    """The demonstrations (answer, or rationale with `cot`) and the question, ending where the answer starts."""
    shown = [f"{task.prompt(d.question)} {d.rationale if cot else d.answer}" for d in demos]
    return SEPARATOR.join([*shown, task.prompt(question)])


def evaluate_fewshot(model: torch.nn.Module, tokenizer, task: PromptTask, shots: Sequence[int], seed: int = 0,
                     demo_labels: str = "gold", limit: int = 50, max_new_tokens: int = 32,
                     show_progress: bool = False) -> FewshotResult:
    """Direct prompting: the first `limit` examples asked with each number of `shots`; multiple choice
    by log-likelihood (acc, acc_norm), generation by greedy decoding and exact match."""
    check_shots(task, shots)
    tests = _tests(task, limit)
    bar = progress_bar(len(shots) * len(tests), desc=f"{task.name} {demo_labels}", unit="question",
                       disable=not show_progress)
    scores = []
    for k in shots:
        prompts = [build_prompt(task, demonstrations(task, i, k, seed, demo_labels), task.examples[i].question)
                   for i in tests]
        examples = [task.examples[i] for i in tests]
        if task.multiple_choice:
            hits = []
            for prompt, example in zip(prompts, examples):
                hits.append(_choice_hits(model, tokenizer, prompt, example))
                bar.update()
            scores.append(ShotScore(k, len(hits), sum(h[0] for h in hits), sum(h[1] for h in hits)))
        else:
            replies = _greedy_replies(model, tokenizer, prompts, max_new_tokens, bar)
            scores.append(ShotScore(k, len(replies), sum(exact_match(r, e.answer) for r, e in zip(replies, examples))))
    bar.close()
    return FewshotResult(task.name, "direct", demo_labels, tuple(scores))


def evaluate_cot(model: torch.nn.Module, tokenizer, task: PromptTask, shots: Sequence[int], seed: int = 0,
                 limit: int = 50, samples: int = 1, temperature: float = 0.7, max_new_tokens: int = 128,
                 show_progress: bool = False) -> FewshotResult:
    """Chain of thought: demonstrations show their rationales, the model writes its own and the answer
    is extracted from it (`extract_answer`). samples=1 decodes greedily; samples=K > 1 samples K chains
    per question at `temperature` (seeded) and grades the majority answer (self-consistency)."""
    if not task.has_rationales:
        raise LmlabError(f"--cot needs a worked rationale for every example and {task.name} lacks them; use "
                         "the arithmetic task, or add \"rationale\" to every line of the file")
    if samples < 1:
        raise LmlabError(f"--self-consistency {samples} must be at least 1 chain per question")
    if task.multiple_choice:
        raise LmlabError("--cot grades a generated answer; use it on a generation task (arithmetic, or "
                         "input/target lines)")
    check_shots(task, shots)
    tests = _tests(task, limit)
    mode = "cot" if samples == 1 else "self-consistency"
    bar = progress_bar(len(shots) * len(tests), desc=f"{task.name} {mode}", unit="question",
                       disable=not show_progress)
    scores = []
    for k in shots:
        correct = 0
        prompts = [build_prompt(task, demonstrations(task, i, k, seed), task.examples[i].question, cot=True)
                   for i in tests]
        if samples == 1:
            chains = _greedy_replies(model, tokenizer, prompts, max_new_tokens, bar)
            answers = [extract_answer(chain) for chain in chains]
        else:
            answers = []
            for n, prompt in enumerate(prompts):
                config = _config(tokenizer, max_new_tokens, temperature=temperature, seed=seed * 1_000_003 + n)
                ids = _fit(model, tokenizer.encode(prompt), max_new_tokens)
                chains = [g.text for g in generate_batch(model, [ids] * samples, config, tokenizer)]
                answers.append(majority([extract_answer(chain) for chain in chains]))
                bar.update()
        for answer, i in zip(answers, tests):
            correct += answer is not None and exact_match(answer, task.examples[i].answer)
        scores.append(ShotScore(k, len(tests), correct))
    bar.close()
    return FewshotResult(task.name, mode, "gold", tuple(scores))


def _choice_hits(model, tokenizer, prompt: str, example: Example) -> tuple[bool, bool]:
    """(acc, acc_norm) of one multiple-choice question: the prompt once, every choice in one batch."""
    pairs = [split_pair(tokenizer, prompt, " " + choice) for choice in example.choices]
    scored = score_continuations(model, pairs[0][0], [continuation for _, continuation in pairs])
    return choice_hits([s.logprob for s in scored], example.choices, example.gold)


def _greedy_replies(model, tokenizer, prompts: list[str], max_new_tokens: int, bar) -> list[str]:
    """Each prompt's greedy reply up to its first line break, decoded BATCH prompts at a time."""
    config = _config(tokenizer, max_new_tokens)
    replies = []
    for start in range(0, len(prompts), BATCH):
        batch = [_fit(model, tokenizer.encode(p), max_new_tokens) for p in prompts[start:start + BATCH]]
        replies += [g.text for g in generate_batch(model, batch, config, tokenizer)]
        bar.update(len(batch))
    return replies


def _config(tokenizer, max_new_tokens: int, **sampling) -> GenerationConfig:
    """Decoding that stops at a line break (the end of an answer) or the tokenizer's stop tokens."""
    return GenerationConfig(max_new_tokens=max_new_tokens, eos_id=tokenizer.stop_ids or None, stop_strings=("\n",),
                            **sampling)


def _fit(model, ids: list[int], max_new_tokens: int) -> list[int]:
    """The newest tokens of a prompt, as many as leave room for the reply in the model's window."""
    room = model.config.context_length - max_new_tokens
    if room < 1:
        raise LmlabError(f"--max-new-tokens {max_new_tokens} fills the model's {model.config.context_length}-token "
                         "window; ask for fewer")
    return ids[-room:]

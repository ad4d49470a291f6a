"""Where preference methods get their data: rankings and (prompt, chosen, rejected) pairs.

A ranking is a prompt with answers best first (`Ranking`); a pair is a prompt with a better and a
worse answer (`Pair`); a ranking of K answers holds K-choose-2 pairs (`ranking_pairs`). They come
from a JSONL preference file (`read_preferences`: `{"prompt", "chosen", "rejected"}` in any of TRL's
forms, or `{"prompt", "ranked": [best, …]}`, per line: `data.chat_jsonl`), from the embedded addition
task (`load_rankings`, `load_pairs`), or from replies the model itself samples, graded by a reward
(`sampled_pairs`). KTO learns from unpaired answers, each labelled desirable or not (`load_unpaired`:
`{"prompt", "completion", "label"}` lines, or the task's pairs taken apart).
The reward model trains on rankings (`recipes.reward`), DPO on pairs (`recipes.dpo`); what they do
with them (batches, log-probabilities, the reference) is in `training.preference`.
"""

import math
from pathlib import Path

import torch

from lmlab.data.chat_jsonl import read_preference_jsonl, read_unpaired_jsonl
from lmlab.data.tasks import preference_pairs, ranked_answers
from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.losses.bradley_terry import ranked_pairs
from lmlab.progress import progress_bar
from lmlab.tokenizers.chat import chat_prompt
from lmlab.training.post_train_config import TASK
from lmlab.training.post_training import PostTrainConfig, check_example, unique, with_reply
from lmlab.training.rewards import RewardFn

Ranking = tuple[list[dict], list[str]]  # (prompt messages, answers best first)
Pair = tuple[list[dict], str, str]  # (prompt messages, chosen answer, rejected answer)
Unpaired = tuple[list[dict], str, bool]  # (prompt messages, answer, whether it is desirable)


def read_preferences(path: str | Path) -> list[Ranking]:
    """The (prompt, answers best first) rows of a JSONL preference file, prompts checked as for SFT
    (a chosen/rejected line is a ranking of two)."""
    rows = read_preference_jsonl(path)
    for index, (prompt, answers) in enumerate(rows):
        check_example(path, index + 1, with_reply(prompt, answers[0]))
    return rows


def ranking_pairs(ranking: Ranking) -> list[Pair]:
    """Every (better, worse) pair of a ranking's answers, in `ranked_pairs` order: K answers give
    K-choose-2 pairs."""
    prompt, answers = ranking
    better, worse = ranked_pairs(len(answers))
    return [(prompt, answers[i], answers[j]) for i, j in zip(better.tolist(), worse.tolist())]


def load_rankings(data: str, cfg: PostTrainConfig, k: int) -> list[Ranking]:
    """The rankings of a JSONL file, or for "task" `k` answers of distinct rewards to each question
    (each question once)."""
    if data == TASK:
        rows = ranked_answers(cfg.task_size, k, cfg.loop.seed, cfg.task_max_operand)
        return unique(rows, key=lambda row: row[0])
    return read_preferences(data)


def load_pairs(data: str, cfg: PostTrainConfig) -> list[Pair]:
    """The pairs of a JSONL file (every pair of each of its rankings), or for "task" the task's pairs
    (each question once)."""
    if data == TASK:
        pairs = preference_pairs(cfg.task_size, cfg.loop.seed, cfg.task_max_operand)
        return unique(pairs, key=lambda pair: pair[0])
    return [pair for ranking in read_preferences(data) for pair in ranking_pairs(ranking)]


def load_unpaired(data: str, cfg: PostTrainConfig) -> list[Unpaired]:
    """The labelled answers of a JSONL file, or for "task" one answer to each of the task's questions:
    alternately its chosen (desirable) and its rejected answer (undesirable), so each question is seen
    once and the two kinds are balanced."""
    if data == TASK:
        pairs = load_pairs(data, cfg)
        return [(prompt, rejected if i % 2 else chosen, not i % 2) for i, (prompt, chosen, rejected) in enumerate(pairs)]
    rows = read_unpaired_jsonl(data)
    for index, (prompt, answer, _) in enumerate(rows):
        check_example(data, index + 1, with_reply(prompt, answer))
    return rows


@torch.no_grad()
def sampled_pairs(model: torch.nn.Module, tokenizer, prompts: list[list[dict]], score: RewardFn, k: int,
                  max_new_tokens: int = 24, temperature: float = 1.0, seed: int = 0, batch_size: int = 32,
                  references: list[str | None] | None = None, show_progress: bool = False) -> list[Pair]:
    """On-policy preference pairs: `k` sampled replies to each prompt, graded by `score`; the best
    and the worst reply become (prompt, chosen, rejected) when their rewards differ (a prompt whose
    replies all score alike gives no pair). Pairs from the model's own replies teach it about the
    mistakes it actually makes, which fixed pairs may not show.

    `references` (one per prompt, or None) join that prompt's candidates: a reply known to be good
    then pairs with the model's own worst reply even when none of its samples is right."""
    if k < 2:
        raise LmlabError(f"sampling {k} replies per prompt gives no pairs; sample at least 2")
    training = model.training
    model.eval()
    queries = [tokenizer.encode(chat_prompt(tokenizer, prompt)) for prompt in prompts for _ in range(k)]
    replies: list[str] = []
    bar = progress_bar(math.ceil(len(queries) / batch_size), desc="sampling pairs", disable=not show_progress)
    for start in range(0, len(queries), batch_size):
        config = GenerationConfig(max_new_tokens=max_new_tokens, temperature=temperature, eos_id=tokenizer.stop_ids,
                                  seed=seed * 1_000_003 + start)
        replies += [g.text for g in generate_batch(model, queries[start:start + batch_size], config, tokenizer)]
        bar.update(1)
    bar.close()
    model.train(training)
    pairs = []
    for i, prompt in enumerate(prompts):
        candidates = replies[i * k:(i + 1) * k]
        if references is not None and references[i] is not None:
            candidates.append(references[i])
        graded = sorted(((score(prompt, reply), reply) for reply in candidates),
                        key=lambda graded_reply: graded_reply[0])
        (worst, rejected), (best, chosen) = graded[0], graded[-1]
        if best > worst:
            pairs.append((prompt, chosen, rejected))
    return pairs

"""Helpfulness as a win rate: two models answer the same prompts and a judge picks the better reply.

The replies are greedy (`generate_replies`) or read from a file; a judge turns (prompt, reply A, reply B)
into a verdict per prompt, 1 (A better), 0.5 (a tie) or 0 (B better), and `eval.win_rate` makes the
rate, its interval and the length-controlled rate of them. Two judges:

- a reward model (`reward_judge`): each reply is scored alone; the higher score wins, and scores within
  `tie_margin` of each other are a tie. The scoring function is passed in: `lmlab eval preference`
  passes the one `lmlab reward` trains with (`training.reward_model.chat_rewards`).
- a chat model asked to compare (`pairwise_judge`): the two replies are shown in the prompt of
  `JUDGE_INSTRUCTION` as "Reply A" and "Reply B", and the verdict is read from the log-probabilities of
  the letters "A" and "B" as the first token of the judge's answer (not from text it writes). Judges
  favour a position, so each pair is asked twice, A/B and then B/A; a model wins when it wins both
  orders, and a split verdict is a tie.
"""

import dataclasses
from collections.abc import Callable
from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.eval.win_rate import win_rate
from lmlab.figures import IntervalRow, save_interval_chart
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.progress import in_batches
from lmlab.tokenizers.chat import chat_prompt
from lmlab.tokenizers.text import TextTokenizer

# (prompts, replies of A, replies of B) -> per prompt a dict with "verdict" (1, 0.5, 0) and what decided it
Judge = Callable[[list[list[dict]], list[str], list[str]], list[dict]]

JUDGE_SYSTEM = "You are a careful and impartial judge of answers written by AI assistants."
JUDGE_INSTRUCTION = (
    "Which reply answers the conversation below better: more helpful, correct and to the point?\n\n"
    "[Conversation]\n{conversation}\n\n[Reply A]\n{first}\n\n[Reply B]\n{second}\n\n"
    "Answer with one letter, A or B.")
LETTERS = ("A", "B")


def generate_replies(model: torch.nn.Module, tokenizer: TextTokenizer, prompts: list[list[dict]],
                     max_new_tokens: int, batch_size: int = 16, desc: str = "replies") -> list[str]:
    """The model's greedy reply to each chat prompt (its chat template, stopping at its end of turn or
    after `max_new_tokens`), decoded in batches through `generation.generate_batch`."""
    ids = [tokenizer.encode(chat_prompt(tokenizer, prompt)) for prompt in prompts]
    config = GenerationConfig(max_new_tokens=max_new_tokens, eos_id=tokenizer.stop_ids)
    replies = []
    with torch.no_grad():
        for batch in in_batches(ids, batch_size, desc, "reply"):
            replies += [g.text for g in generate_batch(model, list(batch), config, tokenizer)]
    return replies


def reply_lengths(tokenizer: TextTokenizer, replies: list[str]) -> list[int]:
    """Each reply's length in tokens of `tokenizer` (one tokenizer for both sides, so lengths compare)."""
    return [len(tokenizer.encode(reply)) for reply in replies]


def reward_verdict(score_a: float, score_b: float, tie_margin: float) -> float:
    """1 when A's reward beats B's by more than `tie_margin`, 0 when B's beats A's by more, else 0.5."""
    if score_a - score_b > tie_margin:
        return 1.0
    return 0.0 if score_b - score_a > tie_margin else 0.5


def reward_judge(score: Callable[[list[list[dict]]], torch.Tensor], tie_margin: float = 0.0,
                 batch_size: int = 16) -> Judge:
    """A judge from a reward model's `score` (chats, each ending with the assistant's reply -> (N,)):
    both replies of a batch of prompts are scored together, and `reward_verdict` decides."""
    def judge(prompts: list[list[dict]], replies_a: list[str], replies_b: list[str]) -> list[dict]:
        rows = list(zip(prompts, replies_a, replies_b))
        results = []
        with torch.no_grad():
            for batch in in_batches(rows, batch_size, "judging", "pair"):
                chats = [[*p, {"role": "assistant", "content": reply}] for p, a, b in batch for reply in (a, b)]
                scores = score(chats).float().view(-1, 2).tolist()  # (B, 2): A's and B's reward
                results += [{"verdict": reward_verdict(a, b, tie_margin), "score_a": a, "score_b": b}
                            for a, b in scores]
        return results
    return judge


def conversation_text(prompt: list[dict]) -> str:
    """The prompt's messages as "Role: text" paragraphs, for the judge to read."""
    return "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in prompt)


def judge_chat(prompt: list[dict], first: str, second: str) -> list[dict]:
    """The chat that asks a judge to compare `first` (Reply A) with `second` (Reply B) as replies to `prompt`."""
    text = JUDGE_INSTRUCTION.format(conversation=conversation_text(prompt), first=first, second=second)
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": text}]


def letter_ids(tokenizer: TextTokenizer) -> tuple[int, int]:
    """The token ids of "A" and "B", each of which the judge's tokenizer must write as one token."""
    ids = [tokenizer.encode(letter) for letter in LETTERS]
    if any(len(i) != 1 for i in ids) or ids[0] == ids[1]:
        raise LmlabError("the judge's tokenizer does not write 'A' and 'B' as one token each, so its verdict "
                         "cannot be read from their log-probabilities; pass another --judge")
    return ids[0][0], ids[1][0]


def letter_logprobs(model: torch.nn.Module, tokenizer: TextTokenizer, chats: list[list[dict]]) -> torch.Tensor:
    """log p("A") and log p("B") as the first token of the judge's answer to each chat -> (N, 2): the
    chat rendered with the judge's template and its generation prompt, scored in one right-padded batch
    (causal attention: the padding after a row's last token changes nothing before it)."""
    rows = [tokenizer.encode(chat_prompt(tokenizer, chat)) for chat in chats]
    T = max(len(row) for row in rows)
    if T > model.config.context_length:
        raise LmlabError(f"a judge's prompt is {T} tokens, longer than the judge's context of "
                         f"{model.config.context_length}; pass a judge with a longer context, or a lower "
                         "--max-new-tokens for shorter replies")
    pad = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    ids = torch.tensor([row + [pad] * (T - len(row)) for row in rows])  # (N, T)
    last = torch.tensor([len(row) - 1 for row in rows])  # (N,)
    device = next(model.parameters()).device
    logits = model(ids.to(device))[torch.arange(len(rows)), last.to(device)]  # (N, vocab)
    return torch.log_softmax(logits.float(), dim=-1)[:, list(letter_ids(tokenizer))].cpu()  # (N, 2)


def pairwise_verdict(ab: list[float], ba: list[float]) -> float:
    """The verdict of both orders: `ab` = log p(A), log p(B) with A's reply shown first, `ba` with B's
    shown first. A wins when it is preferred in both orders, B likewise; a split verdict is a tie."""
    a_first, a_second = ab[0] - ab[1], ba[1] - ba[0]  # > 0: the order preferred model A's reply
    if a_first > 0 and a_second > 0:
        return 1.0
    return 0.0 if a_first < 0 and a_second < 0 else 0.5


def pairwise_judge(model: torch.nn.Module, tokenizer: TextTokenizer, batch_size: int = 8) -> Judge:
    """A judge from a chat model asked `JUDGE_INSTRUCTION` in both orders (see the module docstring)."""
    if tokenizer.chat_template is None:
        raise LmlabError("--judge-mode pairwise needs a chat model (its tokenizer has no chat template); pass a "
                         "chat model as --judge, or a `lmlab reward` run with --judge-mode reward")
    letter_ids(tokenizer)

    def judge(prompts: list[list[dict]], replies_a: list[str], replies_b: list[str]) -> list[dict]:
        rows = list(zip(prompts, replies_a, replies_b))
        results = []
        with torch.no_grad():
            for batch in in_batches(rows, batch_size, "judging", "pair"):
                chats = [judge_chat(p, *order) for p, a, b in batch for order in ((a, b), (b, a))]
                both = letter_logprobs(model, tokenizer, chats).view(-1, 2, 2).tolist()  # (B, order, letter)
                results += [{"verdict": pairwise_verdict(ab, ba), "logprobs_ab": ab, "logprobs_ba": ba}
                            for ab, ba in both]
        return results
    return judge


def evaluate_preference(prompts: list[list[dict]], replies_a: list[str], replies_b: list[str], judge: Judge,
                        tokenizer: TextTokenizer, n_resamples: int = 1000, seed: int = 0,
                        confidence: float = 0.95) -> dict:
    """Model A's win rate over model B on `prompts` as `judge` decides: the fields of `win_rate.WinRate`,
    the mean reply lengths (tokens of `tokenizer`) and, per prompt, both replies, their lengths and the
    judge's verdict with what decided it."""
    if not prompts or not len(prompts) == len(replies_a) == len(replies_b):
        raise LmlabError(f"a win rate needs one reply of each model per prompt, got {len(prompts)} prompts, "
                         f"{len(replies_a)} and {len(replies_b)} replies")
    verdicts = judge(prompts, replies_a, replies_b)
    length_a, length_b = reply_lengths(tokenizer, replies_a), reply_lengths(tokenizer, replies_b)
    rate = win_rate([v["verdict"] for v in verdicts], length_a, length_b, n_resamples, seed, confidence)
    rows = [{"prompt": p, "reply_a": a, "reply_b": b, "length_a": la, "length_b": lb, **v}
            for p, a, b, la, lb, v in zip(prompts, replies_a, replies_b, length_a, length_b, verdicts)]
    return {**dataclasses.asdict(rate), "mean_length_a": sum(length_a) / len(rows),
            "mean_length_b": sum(length_b) / len(rows), "prompts": rows}


def save_win_rate_chart(path: str | Path, result: dict, name_a: str, name_b: str) -> Path:
    """The win rate with its interval and the length-controlled win rate as two bars, 0.5 marked."""
    low, high = result["interval"]
    controlled = result["length_controlled"]
    rows = [IntervalRow("win rate", result["win_rate"], low, high, "raw"),
            IntervalRow("length-controlled", controlled, controlled, controlled, "length-controlled")]
    return save_interval_chart(path, rows, title=f"{name_a} vs {name_b}: {result['n']} prompts",
                               xlabel=f"win rate of {name_a} (ties count half; {result['confidence']:.0%} "
                                      "bootstrap interval)", reference=0.5)

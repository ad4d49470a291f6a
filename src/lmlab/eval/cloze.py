"""Zero-shot cloze in the LAMBADA style: predict a passage's last word from everything before it.

Two numbers per set of passages:
- accuracy: the model's greedy continuation, read as a whole word, is the target word. Greedy runs
  token by token until the word ends (the next token starts with a space or newline, is punctuation
  other than an apostrophe or hyphen inside the word, or ends the text), so a name split into several
  tokens ("Ok" + "onk" + "wo") counts only when every piece is right, and a word that is only the
  target's prefix ("Ok") or runs on past it ("Okonkwo's") counts as wrong;
- last-word perplexity: exp(mean over passages of -log p(" word" | passage)), one number per
  passage (the whole word, all its tokens), scored as lm-evaluation-harness does.

`last_sentence` cuts a context down to its last sentence: scoring the same passages from it shows how
much of the answer came from the broader context.
"""

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lmlab.errors import LmlabError
from lmlab.eval.loglikelihood import score_continuations, split_pair
from lmlab.generation.config import GenerationConfig
from lmlab.generation.decode import decode_steps
from lmlab.progress import progress_bar

MAX_WORD_TOKENS = 12  # a word longer than this many tokens is cut there (and counts as wrong)
MAX_EXP = 709.0  # math.exp overflows above this
INNER_MARKS = "'’-"  # inside a word ("don't", "well-known"), not at its start
_LAST_WORD = re.compile(rf"(\w[\w{INNER_MARKS}]*)\W*$")
_SENTENCE_END = re.compile(r"[.!?][\"'”’)]*\s+")


@dataclass(frozen=True)
class ClozeResult:
    """How a model did on one passage."""

    target: str
    predicted: str  # the whole word the model wrote greedily ('' if it began with punctuation or stopped)
    logprob: float  # log p(" target" | context), nats, over all the target's tokens

    @property
    def correct(self) -> bool:
        return self.predicted == self.target


def split_passage(passage: str) -> tuple[str, str]:
    """(context, target): the target is the passage's last word (trailing punctuation dropped), the
    context everything before it."""
    match = _LAST_WORD.search(passage.rstrip())
    context = passage[:match.start()].rstrip() if match else ""
    if not match or not context:
        raise LmlabError(f"passage {passage[:40]!r}… needs some text before a last word; pass passages of "
                         "at least two words, one per line")
    return context, match.group(1)


def last_sentence(context: str) -> str:
    """The last sentence of `context` (the text after its last . ! or ? that is followed by a space)."""
    return _SENTENCE_END.split(context)[-1]


def predict_word(model: torch.nn.Module, tokenizer, context: str) -> str:
    """The whole word the model writes greedily after `context` (which has no trailing space)."""
    ids = tokenizer.encode(context)[-(model.config.context_length - MAX_WORD_TOKENS):]
    config = GenerationConfig(max_new_tokens=MAX_WORD_TOKENS, eos_id=tokenizer.stop_ids or None)
    written: list[int] = []
    text = ""
    for step in decode_steps(model, [ids], config):
        token = int(step[0])
        if token in tokenizer.stop_ids:
            break
        longer = tokenizer.decode(written + [token])
        piece = longer[len(text):]
        if _word_ends(text, piece):
            break
        written.append(token)
        text = longer
    return text.strip()


def _word_ends(text: str, piece: str) -> bool:
    """Whether `piece` (the next token's text) is no longer part of the word `text` has begun."""
    if not text.strip(" "):  # the word has not started: spaces may lead it, a word character starts it
        start = piece.lstrip(" ")
        return bool(start) and not _is_word_char(start[0])
    return not piece or not (_is_word_char(piece[0]) or piece[0] in INNER_MARKS)


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def score_passage(model: torch.nn.Module, tokenizer, context: str, target: str) -> ClozeResult:
    """The model's greedy whole word after `context` and its log-probability of " target"."""
    context_ids, target_ids = split_pair(tokenizer, context, " " + target)
    logprob = score_continuations(model, context_ids, [target_ids])[0].logprob
    return ClozeResult(target, predict_word(model, tokenizer, context), logprob)


def summary(results: Sequence[ClozeResult]) -> dict:
    """passages, accuracy and last-word perplexity, as one JSON-ready dict."""
    if not results:
        raise LmlabError("no passages to score; pass a file with at least one passage")
    nll = -sum(r.logprob for r in results) / len(results)
    return {"passages": len(results), "accuracy": sum(r.correct for r in results) / len(results),
            "perplexity": math.exp(nll) if nll < MAX_EXP else math.inf}


def evaluate_cloze(model: torch.nn.Module, tokenizer, passages: Sequence[str], with_last_sentence: bool = True,
                   show_progress: bool = False) -> dict:
    """`summary` over `passages` from their full context and, if `with_last_sentence`, under
    "last_sentence" the same from each context's last sentence only."""
    items = [split_passage(p) for p in passages]
    full, short = [], []
    bar = progress_bar(len(items), desc="cloze", unit="passage", disable=not show_progress)
    for context, target in items:
        full.append(score_passage(model, tokenizer, context, target))
        if with_last_sentence:
            short.append(score_passage(model, tokenizer, last_sentence(context), target))
        bar.update()
    bar.close()
    result = summary(full)
    if with_last_sentence:
        result["last_sentence"] = {k: v for k, v in summary(short).items() if k != "passages"}
    return result

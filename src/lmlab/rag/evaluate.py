"""Closed book against open book: what retrieval adds, on questions about invented people.

Each question of `data.invented_facts` is asked three ways: closed book (the question alone), and
open book with the top 1, 3 and 5 retrieved passages in the prompt (`prompt.open_book_text`),
always through the model's chat template. An answer is scored two ways:
- ranked, as `eval facts` ranks: every candidate answer of the question's relation (the same relation's
  answers for all the people) is scored by log p(answer | prompt) as the start of the reply; right
  when the true answer ranks first (ties count against it). Chance is 1 / candidates.
- generated: the greedy reply (at most GENERATED_TOKENS tokens) holds the true answer as a word, ignoring case,
  closed book and open book with `answer_k` passages.
Retrieval is scored apart from the model: recall@k is the share of questions with a passage of the
person's document that holds the answer among the top k.
"""

import re
from dataclasses import dataclass

import torch

from lmlab.data.invented_facts import InventedFact
from lmlab.errors import LmlabError
from lmlab.eval.loglikelihood import score_continuations, split_pair
from lmlab.generation.config import GenerationConfig
from lmlab.generation.generate import generate_batch
from lmlab.progress import progress_bar
from lmlab.rag.choices import KS
from lmlab.rag.prompt import open_book_text
from lmlab.rag.retrieve import Hit, Retriever
from lmlab.tokenizers.chat import chat_prompt, chat_stop_strings

GENERATED_TOKENS = 24  # enough for "X was born in Y." with an invented name of many tokens


@dataclass(frozen=True)
class Asked:
    """One question asked one way: was the true answer ranked first, was it in the greedy reply."""

    ranked_first: bool
    reply: str | None  # None: not generated this way


def relevant(hit: Hit, fact: InventedFact) -> bool:
    """Whether `hit` is a passage of the fact's document that holds its answer."""
    return hit.passage.source == fact.source and fact.answer in re.findall(r"\w+", hit.passage.text)


def answer_in(answer: str, reply: str) -> bool:
    """Whether `reply` holds `answer` as a whole word, ignoring case ("8" is not in "1800")."""
    return re.search(rf"\b{re.escape(answer)}\b", reply, re.IGNORECASE) is not None


def recall_at(hits: list[list[Hit]], facts: list[InventedFact], k: int) -> float:
    """The share of facts with a relevant passage among their top-k hits."""
    return sum(any(relevant(h, f) for h in row[:k]) for row, f in zip(hits, facts)) / len(facts)


def ask(model, tokenizer, fact: InventedFact, hits: list[Hit], candidates: list[str], generate: bool) -> Asked:
    """Ask `fact`'s question with `hits` in the prompt (none: closed book)."""
    prompt = chat_prompt(tokenizer, [{"role": "user", "content": open_book_text(fact.question, hits)}])
    context = split_pair(tokenizer, prompt, fact.answer)[0]
    continuations = [split_pair(tokenizer, prompt, c)[1] for c in candidates]
    scores = [s.logprob for s in score_continuations(model, context, continuations)]
    gold = scores[candidates.index(fact.answer)]
    ranked_first = not any(s >= gold for c, s in zip(candidates, scores) if c != fact.answer)
    reply = None
    if generate:
        config = GenerationConfig(max_new_tokens=GENERATED_TOKENS, eos_id=tokenizer.stop_ids,
                                  stop_strings=chat_stop_strings(tokenizer))
        reply = generate_batch(model, [tokenizer.encode(prompt)], config, tokenizer)[0].text.strip()
    return Asked(ranked_first, reply)


@torch.no_grad()
def closed_vs_open(model, tokenizer, retriever: Retriever, facts: list[InventedFact], ks=KS, answer_k: int = 3,
                   show_progress: bool = False) -> dict:
    """Recall@k of the retriever, and the model's accuracy closed book and open book with k passages
    (ranked for every k of `ks`, generated closed and at `answer_k`), overall and by relation."""
    if answer_k not in ks:
        raise LmlabError(f"--answer-top {answer_k} must be one of --top ({','.join(map(str, ks))})")
    hits = retriever.retrieve([f.question for f in facts], max(ks))
    candidates = {r: sorted({f.answer for f in facts if f.relation == r}) for r in dict.fromkeys(f.relation
                                                                                                for f in facts)}
    ways = {"closed": 0, **{f"open@{k}": k for k in ks}}
    bar = progress_bar(len(facts) * len(ways), desc="questions", unit="question", disable=not show_progress)
    rows = []
    for fact, fact_hits in zip(facts, hits):
        asked = {}
        for way, k in ways.items():
            asked[way] = ask(model, tokenizer, fact, fact_hits[:k], candidates[fact.relation], k in (0, answer_k))
            bar.update()
        rows.append((fact, asked))
    bar.close()
    return summary(rows, hits, facts, ks, candidates, answer_k)


def summary(rows, hits, facts, ks, candidates: dict, answer_k: int) -> dict:
    """The JSON-ready result of `closed_vs_open`."""
    ways = list(rows[0][1])

    def accuracy(subset, way):
        return sum(asked[way].ranked_first for _, asked in subset) / len(subset)

    def found(subset, way):
        return sum(answer_in(f.answer, asked[way].reply) for f, asked in subset) / len(subset)

    generated = ["closed", f"open@{answer_k}"]
    return {
        "questions": len(facts), "people": len({f.subject for f in facts}),
        "chance": sum(1 / len(candidates[f.relation]) for f in facts) / len(facts),
        "recall": {str(k): recall_at(hits, facts, k) for k in ks},
        "accuracy": {way: accuracy(rows, way) for way in ways},
        "generated": {way: found(rows, way) for way in generated},
        "relations": {r: {way: accuracy([row for row in rows if row[0].relation == r], way) for way in ways}
                      for r in candidates},
        "answers": [{"question": f.question, "answer": f.answer, "relation": f.relation,
                     "ranked_first": {way: a.ranked_first for way, a in asked.items()},
                     "replies": {way: asked[way].reply for way in generated},
                     "retrieved": [h.as_dict() for h in row_hits]}
                    for (f, asked), row_hits in zip(rows, hits)],
    }

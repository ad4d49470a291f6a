"""LAMA-style factual probing: does the model put the true object first when asked for it?

"The capital of France is ___": a causal LM ranks the relation's candidate objects (every object of
the relation: Paris, Berlin, Tokyo, …) by log p(" object" | prompt), all candidates scored together
after one pass over the prompt (`score_continuations`). A masked LM fills "The capital of France is
[MASK]." and ranks its whole vocabulary at the [MASK], as LAMA does; a fact whose object is more than
one wordpiece cannot be one [MASK]'s answer and is skipped (and counted). P@k is the share of facts
whose true object ranks within the top k.

The two rankings are not the same test: a causal LM chooses among a few dozen candidates (chance P@1 =
1 / candidates), a masked LM among ~30,000 wordpieces. A multi-token candidate's log-probability is a
sum over its tokens, so long names are at a disadvantage, as in lm-evaluation-harness's unnormalised
accuracy.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lmlab.data.facts import Relation
from lmlab.errors import LmlabError
from lmlab.eval.loglikelihood import score_continuations, split_pair
from lmlab.progress import progress_bar
from lmlab.tokenizers.wordpiece import encode_batch

MASK_TOKENS = ("[MASK]", "<mask>")  # BERT, ALBERT, ELECTRA / RoBERTa


@dataclass(frozen=True)
class Ranked:
    """Where the true object of one fact ranks among the model's answers."""

    subject: str
    gold: str
    rank: int  # 1 = the model's first choice
    top: str  # the model's first choice


def candidates(relation: Relation) -> tuple[str, ...]:
    """The relation's distinct objects, in the order the table first names them."""
    return tuple(dict.fromkeys(obj for _, obj in relation.pairs))


def precision_at(ranks: Sequence[int], k: int) -> float:
    """P@k: the share of `ranks` (1-based) that are at most k; 0 for no ranks."""
    return sum(rank <= k for rank in ranks) / len(ranks) if ranks else 0.0


def rank_causal(model: torch.nn.Module, tokenizer, relation: Relation, subject: str, gold: str) -> Ranked:
    """Rank every candidate object of `relation` by log p(" object" | causal prompt): one batched
    forward per candidate length in tokens; ties go against the true object."""
    prompt = relation.causal_template.format(subject=subject)
    objects = candidates(relation)
    context = split_pair(tokenizer, prompt, " " + gold)[0]  # the same ids whatever the object
    by_length: dict[int, list[tuple[str, list[int]]]] = {}
    for obj in objects:
        ids = split_pair(tokenizer, prompt, " " + obj)[1]
        by_length.setdefault(len(ids), []).append((obj, ids))
    scores = {}
    for group in by_length.values():  # equal lengths batch without padding (a pad costs what a token costs)
        for (obj, _), scored in zip(group, score_continuations(model, context, [ids for _, ids in group])):
            scores[obj] = scored.logprob
    rank = 1 + sum(score >= scores[gold] for obj, score in scores.items() if obj != gold)
    return Ranked(subject, gold, rank, max(objects, key=scores.__getitem__))


def mask_token(tokenizer) -> str:
    """The tokenizer's mask token ([MASK] or <mask>)."""
    for token in MASK_TOKENS:
        if tokenizer.token_to_id(token) is not None:
            return token
    raise LmlabError(f"the tokenizer has no mask token ({' or '.join(MASK_TOKENS)}); use the masked LM's own tokenizer")


@torch.no_grad()
def rank_masked(model: torch.nn.Module, tokenizer, relation: Relation,
                pairs: Sequence[tuple[str, str]]) -> tuple[list[Ranked], int]:
    """(ranked facts, facts skipped): each (subject, gold) of `pairs` whose gold is one wordpiece is
    ranked over the whole vocabulary at the [MASK] of the masked prompt, in one batch; ties go against
    the true object."""
    mask = mask_token(tokenizer)
    mask_id = tokenizer.token_to_id(mask)
    kept, gold_ids = [], []
    for subject, gold in pairs:
        masked = tokenizer.encode(relation.masked_template.format(subject=subject).replace("[MASK]", mask)).ids
        filled = tokenizer.encode(relation.masked_template.format(subject=subject).replace("[MASK]", gold)).ids
        if len(masked) == len(filled):  # the gold took the mask's one place: a single wordpiece
            kept.append((subject, gold))
            gold_ids.append(filled[masked.index(mask_id)])
    if not kept:
        return [], len(pairs)
    texts = [relation.masked_template.format(subject=s).replace("[MASK]", mask) for s, _ in kept]
    ids, attention, types = encode_batch(tokenizer, texts)  # (B, T)
    device = next(model.parameters()).device
    hidden = model(ids.to(device), attention.to(device), types.to(device))  # (B, T, C)
    rows, positions = (ids == mask_id).nonzero(as_tuple=True)  # one [MASK] per row
    logits = model.mlm_logits(hidden[rows.to(device), positions.to(device)]).float()  # (B, V)
    gold = torch.tensor(gold_ids, device=device)
    gold_logits = logits.gather(1, gold[:, None])  # (B, 1)
    ranks = (logits >= gold_logits).sum(1)  # (B,): ties go against the true object
    tops = logits.argmax(1)
    ranked = [Ranked(s, g, int(r), tokenizer.id_to_token(int(t))) for (s, g), r, t in zip(kept, ranks, tops)]
    return ranked, len(pairs) - len(kept)


def relation_summary(ranked: Sequence[Ranked], skipped: int, ks: Sequence[int] = (1, 10)) -> dict:
    """facts, scored, skipped and P@k for each k, as one JSON-ready dict."""
    ranks = [r.rank for r in ranked]
    return {"facts": len(ranked) + skipped, "scored": len(ranked), "skipped": skipped,
            **{f"p_at_{k}": precision_at(ranks, k) for k in ks}}


def evaluate_facts(model: torch.nn.Module, tokenizer, relations: Sequence[Relation], masked: bool,
                   show_progress: bool = False) -> dict:
    """P@1 and P@10 per relation and over all facts (micro-average), and every fact's rank: a masked
    LM (`masked`) ranks its vocabulary at [MASK], a causal LM the relation's candidates."""
    bar = progress_bar(sum(len(r.pairs) for r in relations), desc="facts", unit="fact", disable=not show_progress)
    per_relation, every, skipped_total = {}, [], 0
    for relation in relations:
        if masked:
            ranked, skipped = rank_masked(model, tokenizer, relation, relation.pairs)
            bar.update(len(relation.pairs))
        else:
            ranked, skipped = [], 0
            for subject, gold in relation.pairs:
                ranked.append(rank_causal(model, tokenizer, relation, subject, gold))
                bar.update()
        per_relation[relation.name] = relation_summary(ranked, skipped)
        if not masked:
            per_relation[relation.name]["candidates"] = len(candidates(relation))
        every += [(relation.name, r) for r in ranked]
        skipped_total += skipped
    bar.close()
    return {"kind": "masked" if masked else "causal", "relations": per_relation,
            "overall": relation_summary([r for _, r in every], skipped_total),
            "facts": [{"relation": name, **vars(r)} for name, r in every]}

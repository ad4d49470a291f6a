"""Entity-level F1 for BIO tagging (CoNLL-2003's measure): an entity counts only when its type and
its span both match exactly; tokens that are right inside a wrong span earn nothing.

Tags are "B-TYPE" (begins an entity), "I-TYPE" (continues it) and "O" (outside). An "I-TYPE" that
does not continue an entity of its type starts one, as the CoNLL evaluation script reads it.
"""

from collections.abc import Sequence

from lmlab.errors import LmlabError


def bio_entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The entities of one tagged sentence as (type, first word, last word): ["B-PER", "I-PER", "O", "B-LOC"]
    -> {("PER", 0, 1), ("LOC", 3, 3)}."""
    entities, current = set(), None  # current: (type, start) of the entity being read
    for i, tag in enumerate([*tags, "O"]):  # a final "O" closes the last entity
        prefix, _, kind = tag.partition("-")
        if tag != "O" and (prefix not in ("B", "I") or not kind):
            raise LmlabError(f"tag '{tag}' is not BIO; use O, B-TYPE or I-TYPE")
        continues = prefix == "I" and current is not None and current[0] == kind
        if current is not None and not continues:
            entities.add((current[0], current[1], i - 1))
            current = None
        if tag != "O" and not continues:
            current = (kind, i)
    return entities


def entity_f1(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> dict[str, float]:
    """Precision, recall and F1 of the predicted entities over all sentences (each a list of tags)."""
    if len(predicted) != len(gold):
        raise LmlabError(f"{len(predicted)} predicted sentences for {len(gold)} gold ones; pass one per sentence")
    correct = n_predicted = n_gold = 0
    for index, (p, g) in enumerate(zip(predicted, gold)):
        if len(p) != len(g):
            raise LmlabError(f"sentence {index}: {len(p)} predicted tags for {len(g)} words")
        p_entities, g_entities = bio_entities(p), bio_entities(g)
        correct += len(p_entities & g_entities)
        n_predicted += len(p_entities)
        n_gold += len(g_entities)
    precision = correct / n_predicted if n_predicted else 0.0
    recall = correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}

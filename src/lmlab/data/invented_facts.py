"""Facts about invented people, and questions with exact answers: what no model has memorised.

Every name, town and pet here is made up by this generator from syllables, with a seed, so a model
can answer a question about them only from the documents (open book), never from its pre-training
(closed book): the gap between the two is what retrieval adds. Each person gets one short biography
(a document) holding four facts, among sentences that say nothing a question asks:

    town    "In which town was Dalvek Orrin born?"             -> Quenmere
    year    "In which year was Dalvek Orrin born?"             -> 1874
    count   "How many bridges did Dalvek Orrin build?"         -> 37
    pet     "What was the name of Dalvek Orrin's dog?"         -> Tibbin

A relation's candidate answers are its answers over every person, as `eval facts` ranks a relation's
objects.
"""

import random
from dataclasses import dataclass

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kr", "th", "qu")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "or", "el")
_CODAS = ("", "n", "r", "l", "k", "s", "th", "v")
_TOWN_ENDS = ("mere", "wick", "holt", "by", "ford", "stead", "vale", "mouth")
_PET_ENDS = ("bin", "pip", "do", "zel", "mo", "kin")
_THINGS = ("bridges", "boats", "clocks", "barns", "organs", "kilns")
_FILLER = ("{name} kept a small notebook of recipes and rarely lent it to anyone.",
           "Neighbours remember {name} as quiet, patient and fond of long walks.",
           "In later life {name} took up painting, mostly of harbours in winter.",
           "{name} never learned to swim, which surprised those who knew the family.",
           "Letters written by {name} are kept in a private collection.")
QUESTIONS = {
    "town": "In which town was {name} born?",
    "year": "In which year was {name} born?",
    "count": "How many {things} did {name} build?",
    "pet": "What was the name of {name}'s dog?",
}


@dataclass(frozen=True)
class InventedFact:
    """One question about an invented person, its exact answer, and the document that holds it."""

    relation: str
    subject: str
    question: str
    answer: str
    source: str


def _word(rng: random.Random, syllables: int, end: str = "") -> str:
    parts = [rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)]
    return ("".join(parts) + (end or rng.choice(_CODAS))).capitalize()


def _unique(rng: random.Random, n: int, make) -> list[str]:
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen.setdefault(make(rng), None)
    return list(seen)


def invented_facts(people: int = 20, seed: int = 0) -> tuple[list[tuple[str, str]], list[InventedFact]]:
    """(documents as (source, text), facts): a biography of each of `people` invented people and
    four questions about each (see the module's docstring); the same `seed` gives the same set."""
    rng = random.Random(seed)
    names = _unique(rng, people, lambda r: f"{_word(r, 2)} {_word(r, 2)}")
    towns = _unique(rng, people, lambda r: _word(r, 1, r.choice(_TOWN_ENDS)))
    pets = _unique(rng, people, lambda r: _word(r, 1, r.choice(_PET_ENDS)))
    years = rng.sample(range(1720, 1960), people)
    documents, facts = [], []
    for name, town, pet, year in zip(names, towns, pets, years):
        things, count = rng.choice(_THINGS), rng.randint(3, 99)
        source = name.lower().replace(" ", "-") + ".txt"
        sentences = [f"{name} was born in {town} in {year}.", f"Over a long career {name} built {count} {things}.",
                     f"{name} had a dog called {pet}."]
        sentences += [f.format(name=name) for f in rng.sample(_FILLER, 3)]
        rng.shuffle(sentences)
        documents.append((source, " ".join(sentences)))
        answers = {"town": town, "year": str(year), "count": str(count), "pet": pet}
        facts += [InventedFact(relation, name, QUESTIONS[relation].format(name=name, things=things), answer, source)
                  for relation, answer in answers.items()]
    return documents, facts

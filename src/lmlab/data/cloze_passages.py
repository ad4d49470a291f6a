"""Short stories in the style of LAMBADA: the last word is easy to guess from the whole passage and
hard to guess from its last sentence alone.

Each story names a person, a place or a thing early on and asks for it again in its last word, after
a last sentence that could end with many words ("... bought a train ticket back to" — which city?).
Some stories name a second person as a distractor, so the answer needs who did what, not only who
was mentioned. Stories are drawn from fixed templates and word lists with a seeded generator, so
`cloze_passages(n, seed)` is the same list on every machine. Every target is a single word.
"""

import random

from lmlab.errors import LmlabError
from lmlab.io.lines import read_lines

MAX_PASSAGES = 100_000

WOMEN = ("Anna", "Maria", "Emma", "Sarah", "Laura", "Lucy", "Helen", "Julia", "Clara", "Grace", "Alice", "Nora")
MEN = ("Tom", "James", "David", "Peter", "Daniel", "Michael", "Robert", "Samuel", "Oliver", "Henry", "Jack", "Felix")
CITIES = ("Paris", "London", "Rome", "Vienna", "Madrid", "Berlin", "Dublin", "Lisbon", "Prague", "Boston",
          "Chicago", "Athens", "Warsaw", "Oslo")
HEIRLOOMS = ("clock", "mirror", "lamp", "teapot", "painting", "compass", "typewriter", "camera", "globe",
             "telescope", "radio", "kettle")
ANIMALS = ("dog", "cat", "horse", "goat", "donkey", "rabbit", "pony", "parrot", "tortoise", "goose")
INSTRUMENTS = ("violin", "guitar", "trumpet", "flute", "cello", "clarinet", "saxophone", "harp", "accordion")
DISHES = ("soup", "pie", "bread", "stew", "pancakes", "curry", "lasagna", "dumplings", "cheesecake")

# Each template: (slots it needs, text); the text ends with the target, "{x}".
TEMPLATES = (
    ("woman heirloom",
     "{name} found an old {x} in the attic of her grandmother's house. It was covered in dust, but she cleaned "
     "it carefully and put it on the kitchen table. When her brother came home that evening, he stopped in the "
     "doorway and asked where she had found the {x}"),
    ("woman man",
     "{x} baked a cake for the school fair while {other} painted the sign above the stall. At the fair everyone "
     "praised the cake, and the headmaster wanted to know who had made it. Without a word, everyone pointed "
     "at {x}"),
    ("person city",
     "{name} was born in {x} but moved away with {their} parents at the age of ten. For years {they} dreamed "
     "of the narrow streets and the smell of the bakery on the corner. Last summer {they} finally saved enough "
     "money and bought a train ticket back to {x}"),
    ("animal",
     "The {x} had belonged to the Miller family for almost twelve years. Every morning the children fed it "
     "before school, and every evening it waited for them by the gate. So when the gate was left open one "
     "night and it disappeared, the whole street went out with torches to look for the lost {x}"),
    ("person",
     "Everyone in the office liked {x}, the quiet accountant who brought biscuits on Fridays. When the manager "
     "announced that somebody would be promoted, nobody expected it to be the quiet one. But on Monday "
     "morning, the name painted on the door of the corner office was {x}"),
    ("person instrument",
     "{name} practised the {x} for three hours every day, even when the neighbours complained. At the end "
     "of the year the school held a concert, and {they} was the last to perform. The hall went quiet as {they} "
     "walked onto the stage and picked up the {x}"),
    ("man dish",
     "Grandpa {name} made the best {x} in the whole town, and every Sunday the family gathered at his house "
     "to eat it. After he died, nobody could get the recipe right. Years later his granddaughter found his old "
     "notebook, and on the very first page was the recipe for his famous {x}"),
    ("man woman",
     "{x} lent {other} his bicycle for the summer. {other} rode it to the lake every day and never once said "
     "thank you. When autumn came and the bicycle came back with a flat tyre and a broken bell, the one who "
     "was most upset about it was {x}"),
)

# The target slot's word list for each template kind; the other slots are filled around it.
TARGETS = {"heirloom": HEIRLOOMS, "city": CITIES, "animal": ANIMALS, "instrument": INSTRUMENTS, "dish": DISHES}


def cloze_passages(n: int, seed: int = 0) -> list[str]:
    """`n` passages (cycling through the templates in a seeded order), each ending with its target word."""
    if not 1 <= n <= MAX_PASSAGES:
        raise LmlabError(f"--passages {n} must be between 1 and {MAX_PASSAGES:,}")
    rng = random.Random(seed)
    order = list(range(len(TEMPLATES)))
    passages = []
    while len(passages) < n:
        rng.shuffle(order)
        passages.extend(_passage(*TEMPLATES[i], rng) for i in order)
    return passages[:n]


def _passage(slots: str, text: str, rng: random.Random) -> str:
    kinds = slots.split()
    woman, man = rng.choice(WOMEN), rng.choice(MEN)
    fill = {}
    if kinds[0] in ("woman", "man", "person"):
        is_woman = kinds[0] == "woman" or (kinds[0] == "person" and rng.random() < 0.5)
        person = woman if is_woman else man
        fill |= {"they": "she" if is_woman else "he", "their": "her" if is_woman else "his"}
        if len(kinds) == 1 or kinds[1] in ("woman", "man"):
            fill |= {"x": person, "other": man if is_woman else woman}
        else:
            fill |= {"name": person, "x": rng.choice(TARGETS[kinds[1]])}
    else:
        fill["x"] = rng.choice(TARGETS[kinds[0]])
    return text.format(**fill)


def read_passages(path: str) -> list[str]:
    """The passages of a text file: one per non-empty line, surrounding spaces dropped."""
    passages = [line.strip() for _, line in read_lines(path) if line.strip()]
    if not passages:
        raise LmlabError(f"'{path}' has no passages; put one passage per line, each ending with the word to predict")
    return passages

"""Numbers written out in English words, rewritten as digits: a sequence-to-sequence task generated in code.

    "three hundred and twelve"  ->  "312"
    "Four thousand and six"     ->  "4006"
    "nine thousand nine hundred ninety-nine"  ->  "9999"

Forms vary in the British "and" (kept or dropped) and in a capital first letter; each has exactly
one answer. Splits are by number: a test number never appears in training, in any form.

The same words make a text corpus (`number_corpus`): short documents of sentences about counts
of things, each count written out or in digits. By default a sentence never holds both, so the
corpus teaches the words and the digits of numbers but not the mapping between them; with
`paired` > 0 that share of sentences writes a number both ways, as cheques and forms do
("a cheque for 312 (three hundred and twelve) pounds"), and `exclude` keeps chosen numbers (a
task's held-out ones) out of the corpus entirely. Pre-training on it (T5 span corruption, BART
denoising) is the "own objective" stage of the `encoder-decoder-pretraining` experiment.
"""

import random

from lmlab.data.pairs import PairSplits, TaskSizes, split_keys
from lmlab.errors import LmlabError

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
MAX_NUMBER = 9999  # the task's numbers are 0..MAX_NUMBER
LARGEST_WRITABLE = 999_999


def number_words(n: int, british_and: bool = True) -> str:
    """`n` (0..999999) in words: 312 -> "three hundred and twelve" (without "and" when not `british_and`)."""
    if not 0 <= n <= LARGEST_WRITABLE:
        raise LmlabError(f"{n} is outside 0..{LARGEST_WRITABLE}, the numbers this module writes out")
    if n == 0:
        return ONES[0]
    thousands, rest = divmod(n, 1000)
    words = [_below_thousand(thousands, british_and), "thousand"] if thousands else []
    if rest:
        if thousands and rest < 100 and british_and:
            words.append("and")
        words.append(_below_thousand(rest, british_and))
    return " ".join(words)


def _below_thousand(n: int, british_and: bool) -> str:
    hundreds, rest = divmod(n, 100)
    words = [ONES[hundreds], "hundred"] if hundreds else []
    if rest:
        if hundreds and british_and:
            words.append("and")
        words.append(ONES[rest] if rest < 20 else TENS[rest // 10] + ("-" + ONES[rest % 10] if rest % 10 else ""))
    return " ".join(words)


def number_form(n: int, rng: random.Random) -> str:
    """`n` in words, with or without the British "and", sometimes capitalised."""
    text = number_words(n, british_and=rng.random() < 0.7)
    return text[0].upper() + text[1:] if rng.random() < 0.2 else text


def number_task(seed: int = 0, sizes: TaskSizes = TaskSizes(), max_number: int = MAX_NUMBER) -> PairSplits:
    """(words, digits) pairs of numbers 0..max_number in three splits that share no number."""
    if not 10 <= max_number <= LARGEST_WRITABLE:
        raise LmlabError(f"max_number={max_number} must lie in 10..{LARGEST_WRITABLE}")
    rng = random.Random(seed)
    train, validation, test = split_keys(list(range(max_number + 1)), sizes.held_out_fraction, rng)

    def pairs(keys: list[int], n: int) -> list[tuple[str, str]]:
        return [(number_form(k, rng), str(k)) for k in (rng.choice(keys) for _ in range(n))]

    return PairSplits(pairs(train, sizes.train), pairs(validation, sizes.validation), pairs(test, sizes.test))


NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Juno", "Kai", "Lena"]
THINGS = ["apples", "books", "sheep", "coins", "letters", "trees", "stones", "birds", "chairs", "tickets", "boats",
          "lamps"]
PLACES = ["market", "library", "farm", "harbour", "school", "garden", "museum", "station", "village", "forest"]
TEMPLATES = [
    "{name} counted {n} {things} at the {place}.",
    "There were {n} {things} in the {place}.",
    "The {place} sold {n} {things} last year.",
    "{name} bought {n} {things} and gave them away.",
    "In the {place} we found {n} {things}.",
    "About {n} {things} were left near the {place}.",
    "{name} said the {place} holds {n} {things}.",
    "Only {n} {things} came back to the {place}.",
]


PAIRED_TEMPLATES = [
    "{name} wrote a cheque for {digits} ({words}) pounds.",
    "The form said {words} {things}, in figures {digits}.",
    "{name} read the number {digits} aloud as {words}.",
    "The {place} ordered {digits} {things}; the letter spelled it out: {words}.",
]


def number_sentence(rng: random.Random, max_number: int = MAX_NUMBER, paired: float = 0.0,
                    exclude: frozenset[int] = frozenset()) -> str:
    """A sentence about a count of things (0..max_number, never one of `exclude`): with probability
    `paired` written both in digits and in words, else one of the two, half and half."""
    n = rng.randint(0, max_number)
    while n in exclude:
        n = rng.randint(0, max_number)
    words = number_words(n, british_and=rng.random() < 0.7)
    fill = {"name": rng.choice(NAMES), "things": rng.choice(THINGS), "place": rng.choice(PLACES)}
    if rng.random() < paired:
        sentence = rng.choice(PAIRED_TEMPLATES).format(digits=n, words=words, **fill)
    else:
        sentence = rng.choice(TEMPLATES).format(n=words if rng.random() < 0.5 else str(n), **fill)
    return sentence[0].upper() + sentence[1:]


def number_corpus(n_documents: int, seed: int = 0, sentences: tuple[int, int] = (3, 8),
                  max_number: int = MAX_NUMBER, paired: float = 0.0, exclude: frozenset[int] = frozenset()
                  ) -> list[str]:
    """`n_documents` documents of `sentences` (min, max) sentences each from `number_sentence`."""
    if len(exclude) > max_number // 2:
        raise LmlabError(f"excluding {len(exclude)} of the {max_number + 1} numbers leaves too few to write about")
    rng = random.Random(seed)
    return [" ".join(number_sentence(rng, max_number, paired, exclude) for _ in range(rng.randint(*sentences)))
            for _ in range(n_documents)]

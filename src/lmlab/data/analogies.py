"""A generated corpus in which word analogies hold by construction, and the analogy questions it implies.

A small probabilistic grammar writes sentences about entities that stand in known relations:
- countries, their capitals and their languages ("paris is the capital of france",
  "the people of france speak french");
- male and female roles that share an activity ("the king said that he ruled the kingdom" and
  "the queen said that she ruled the kingdom");
- singular and plural nouns that share their topic words but not their determiners or verb
  agreement ("a cat chases the mouse", "many cats chase the mouse");
- present and past forms of verbs that share their objects but not their time adverbs
  ("every day we walk to the park", "yesterday we walked to the park").

So a word's vector should be (its entity's topic) + (its role in the relation), and the vector
offsets b - a ~ d - c that analogies test follow from the generator: every pair of pairs in one
relation gives a question "a b c d" (a is to b as c is to d). Each sentence also carries its topic
(which relation it was written about), which `tagged_sentences` exposes for a token-tagging task
where the same function word ("the", "in", "that") is tagged differently by its context.
"""

import random

from lmlab.errors import LmlabError

# (country, capital, language)
COUNTRIES = (
    ("france", "paris", "french"), ("germany", "berlin", "german"), ("italy", "rome", "italian"),
    ("spain", "madrid", "spanish"), ("japan", "tokyo", "japanese"), ("china", "beijing", "chinese"),
    ("russia", "moscow", "russian"), ("greece", "athens", "greek"), ("poland", "warsaw", "polish"),
    ("sweden", "stockholm", "swedish"), ("norway", "oslo", "norwegian"), ("turkey", "ankara", "turkish"),
    ("finland", "helsinki", "finnish"), ("hungary", "budapest", "hungarian"),
    ("netherlands", "amsterdam", "dutch"), ("korea", "seoul", "korean"), ("thailand", "bangkok", "thai"),
    ("vietnam", "hanoi", "vietnamese"), ("denmark", "copenhagen", "danish"), ("portugal", "lisbon", "portuguese"),
)
# (male, female, what both do)
ROLES = (
    ("man", "woman", "walked down the long street"), ("king", "queen", "ruled the old kingdom"),
    ("boy", "girl", "played in the school yard"), ("father", "mother", "cooked dinner for the children"),
    ("son", "daughter", "visited the parents on sunday"), ("brother", "sister", "shared a room as a child"),
    ("uncle", "aunt", "brought presents at christmas"), ("husband", "wife", "signed the marriage papers"),
    ("prince", "princess", "will inherit the throne"), ("actor", "actress", "performed on the stage"),
    ("waiter", "waitress", "served the guests their food"), ("nephew", "niece", "came to the family reunion"),
)
# (singular, plural, topic words)
NOUNS = (
    ("cat", "cats", ("mouse", "milk")), ("dog", "dogs", ("bone", "leash")), ("car", "cars", ("road", "engine")),
    ("bird", "birds", ("nest", "feather")), ("tree", "trees", ("forest", "leaf")), ("house", "houses", ("roof", "door")),
    ("book", "books", ("page", "library")), ("horse", "horses", ("saddle", "stable")),
    ("ship", "ships", ("harbor", "sail")), ("apple", "apples", ("orchard", "juice")),
    ("river", "rivers", ("bridge", "bank")), ("computer", "computers", ("keyboard", "screen")),
    ("flower", "flowers", ("garden", "petal")), ("train", "trains", ("station", "track")),
    ("student", "students", ("exam", "lesson")), ("farmer", "farmers", ("field", "harvest")),
)
# (present, past, object)
VERBS = (
    ("walk", "walked", "to the park"), ("eat", "ate", "fresh bread"), ("see", "saw", "the sunrise"),
    ("write", "wrote", "long letters"), ("sing", "sang", "old songs"), ("swim", "swam", "in the lake"),
    ("drive", "drove", "to the office"), ("buy", "bought", "cheap vegetables"), ("paint", "painted", "the fence"),
    ("play", "played", "the piano"), ("cook", "cooked", "spicy soup"), ("build", "built", "wooden boats"),
    ("teach", "taught", "young pupils"), ("sleep", "slept", "in the afternoon"), ("run", "ran", "along the beach"),
    ("speak", "spoke", "to the neighbours"),
)
ADJECTIVES = ("big", "small", "beautiful", "quiet", "busy", "famous", "cold", "warm", "old", "modern")
SUBJECTS = ("i", "we", "you", "they")

TOPICS = ("country", "gender", "number", "tense")
SECTIONS = {
    "capital-country": [(capital, country) for country, capital, _ in COUNTRIES],
    "country-language": [(country, language) for country, _, language in COUNTRIES],
    "male-female": [(male, female) for male, female, _ in ROLES],
    "singular-plural": [(singular, plural) for singular, plural, _ in NOUNS],
    "present-past": [(present, past) for present, past, _ in VERBS],
}


def _country_sentence(rng: random.Random) -> str:
    country, capital, language = rng.choice(COUNTRIES)
    adj = rng.choice(ADJECTIVES)
    return rng.choice((
        f"{capital} is the capital of {country}",
        f"the city of {capital} is {adj}",
        f"we flew to the city of {capital} last year",
        f"{country} is a {adj} country",
        f"the people of {country} speak {language}",
        f"in the streets of {capital} people speak {language}",
        f"the government of {country} meets in {capital}",
        f"{language} is the language spoken in {country}",
        f"the country of {country} has a long border",
        f"the mayor of {capital} lives in a {adj} city",
    ))


def _gender_sentence(rng: random.Random) -> str:
    male, female, activity = rng.choice(ROLES)
    role, subject, possessive = (male, "he", "his") if rng.random() < 0.5 else (female, "she", "her")
    return rng.choice((
        f"the {role} said that {subject} {activity}",
        f"the {role} {activity}",
        f"{subject} is a {role} who {activity}",
        f"the {role} told {possessive} friend that {subject} {activity}",
        f"everyone knows the {role} because {subject} {activity}",
    ))


def _number_sentence(rng: random.Random) -> str:
    singular, plural, topic = rng.choice(NOUNS)
    word = rng.choice(topic)
    if rng.random() < 0.5:
        det, noun, verb, has = rng.choice(("a", "the", "one", "this", "that", "every")), singular, "is", "has"
    else:
        det, noun, verb, has = rng.choice(("many", "the", "two", "these", "those", "some")), plural, "are", "have"
    adj = rng.choice(ADJECTIVES)
    return rng.choice((
        f"{det} {noun} {verb} near the {word}",
        f"{det} {adj} {noun} {has} a {word}",
        f"{det} {noun} {verb} {adj} like the {word}",
        f"we noticed {det} {noun} by the {word}",
    ))


def _tense_sentence(rng: random.Random) -> str:
    present, past, obj = rng.choice(VERBS)
    subject = rng.choice(SUBJECTS)
    if rng.random() < 0.5:
        when = rng.choice(("every day", "usually", "often", "now", "today", "always"))
        return f"{when} {subject} {present} {obj}" if rng.random() < 0.5 else f"{subject} {present} {obj} {when}"
    when = rng.choice(("yesterday", "last week", "once", "long ago", "last year", "earlier"))
    return f"{when} {subject} {past} {obj}" if rng.random() < 0.5 else f"{subject} {past} {obj} {when}"


_WRITERS = {"country": _country_sentence, "gender": _gender_sentence, "number": _number_sentence,
            "tense": _tense_sentence}


def tagged_sentences(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """n generated sentences (lower-case words, single spaces, no punctuation), each with its topic
    (one of TOPICS); the same `seed` gives the same sentences."""
    if n < 1:
        raise LmlabError(f"the number of sentences must be at least 1, got {n}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        topic = rng.choice(TOPICS)
        out.append((_WRITERS[topic](rng), topic))
    return out


def analogy_corpus(n_sentences: int, seed: int = 0, sentences_per_doc: int = 50) -> list[str]:
    """The generated corpus as documents of `sentences_per_doc` sentences, one sentence a line ending in " .". """
    sentences = [text for text, _ in tagged_sentences(n_sentences, seed)]
    return ["\n".join(s + " ." for s in sentences[i:i + sentences_per_doc])
            for i in range(0, len(sentences), sentences_per_doc)]


def analogy_questions() -> list[tuple[str, str, str, str, str]]:
    """Every question (section, a, b, c, d) meaning "a is to b as c is to d" that the generator implies:
    all ordered pairs of distinct pairs within each section of SECTIONS."""
    return [(section, a, b, c, d) for section, pairs in SECTIONS.items()
            for a, b in pairs for c, d in pairs if a != c]


def format_questions(questions: list[tuple[str, str, str, str, str]]) -> str:
    """Questions in the usual text format: ": section" header lines, then "a b c d" lines."""
    lines, section = [], None
    for name, a, b, c, d in questions:
        if name != section:
            lines.append(f": {name}")
            section = name
        lines.append(f"{a} {b} {c} {d}")
    return "\n".join(lines) + "\n"

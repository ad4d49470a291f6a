"""A small table of true, uncontroversial facts for LAMA-style factual probing.

Each relation maps a subject to one object and carries two prompts for it:
- `causal_template` ends right before the object, which follows with a leading space
  ("The capital of France is" + " Paris"), for decoder LMs that score continuations;
- `masked_template` holds one `[MASK]` where the object goes ("The capital of France is [MASK]."),
  for encoder LMs that fill in a masked word.

The facts were written by hand from general knowledge. Countries whose capital, language or
continent is disputed or split (several official languages, transcontinental states, capitals under
relocation) are left out on purpose, so a wrong answer is the model's mistake, not the table's.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Relation:
    """One relation: its prompts and its (subject, object) pairs."""

    name: str
    causal_template: str
    masked_template: str
    pairs: tuple[tuple[str, str], ...]


CAPITAL = Relation(
    name="capital",
    causal_template="The capital of {subject} is",
    masked_template="The capital of {subject} is [MASK].",
    pairs=(
        ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
        ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"),
        ("Greece", "Athens"), ("Poland", "Warsaw"), ("Sweden", "Stockholm"), ("Norway", "Oslo"),
        ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Austria", "Vienna"), ("Hungary", "Budapest"),
        ("Ireland", "Dublin"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Canada", "Ottawa"),
        ("Argentina", "Buenos Aires"), ("Peru", "Lima"), ("Chile", "Santiago"), ("Thailand", "Bangkok"),
        ("Vietnam", "Hanoi"), ("Philippines", "Manila"), ("South Korea", "Seoul"), ("Iran", "Tehran"),
        ("Iraq", "Baghdad"), ("Cuba", "Havana"), ("Belgium", "Brussels"), ("Czech Republic", "Prague"),
        ("Romania", "Bucharest"), ("Australia", "Canberra"), ("New Zealand", "Wellington"),
        ("Nigeria", "Abuja"), ("Ethiopia", "Addis Ababa"), ("Morocco", "Rabat"), ("Venezuela", "Caracas"),
        ("Pakistan", "Islamabad"), ("Afghanistan", "Kabul"), ("Nepal", "Kathmandu"),
        ("Bangladesh", "Dhaka"), ("Iceland", "Reykjavik"), ("Mexico", "Mexico City"),
        ("Saudi Arabia", "Riyadh"), ("Syria", "Damascus"), ("Turkey", "Ankara"),
    ),
)

LANGUAGE = Relation(
    name="language",
    causal_template="The official language of {subject} is",
    masked_template="The official language of {subject} is [MASK].",
    pairs=(
        ("France", "French"), ("Germany", "German"), ("Italy", "Italian"), ("Spain", "Spanish"),
        ("Portugal", "Portuguese"), ("Brazil", "Portuguese"), ("Mexico", "Spanish"), ("Argentina", "Spanish"),
        ("Japan", "Japanese"), ("Russia", "Russian"), ("Greece", "Greek"), ("Poland", "Polish"),
        ("Sweden", "Swedish"), ("Denmark", "Danish"), ("Hungary", "Hungarian"), ("Turkey", "Turkish"),
        ("Egypt", "Arabic"), ("Saudi Arabia", "Arabic"), ("Iran", "Persian"), ("Thailand", "Thai"),
        ("Vietnam", "Vietnamese"), ("South Korea", "Korean"), ("Austria", "German"),
        ("Netherlands", "Dutch"), ("Romania", "Romanian"), ("Czech Republic", "Czech"),
        ("Iceland", "Icelandic"), ("Indonesia", "Indonesian"), ("Chile", "Spanish"),
        ("Colombia", "Spanish"), ("Bulgaria", "Bulgarian"), ("Ukraine", "Ukrainian"),
    ),
)

CURRENCY = Relation(
    name="currency",
    causal_template="The currency of {subject} is the",
    masked_template="The currency of {subject} is the [MASK].",
    pairs=(
        ("Japan", "yen"), ("China", "yuan"), ("India", "rupee"), ("Russia", "ruble"), ("Mexico", "peso"),
        ("Argentina", "peso"), ("Brazil", "real"), ("South Korea", "won"), ("Thailand", "baht"),
        ("Vietnam", "dong"), ("Indonesia", "rupiah"), ("Sweden", "krona"), ("Norway", "krone"),
        ("Denmark", "krone"), ("Poland", "zloty"), ("Hungary", "forint"), ("Switzerland", "franc"),
        ("Turkey", "lira"), ("Egypt", "pound"), ("Saudi Arabia", "riyal"), ("South Africa", "rand"),
        ("Nigeria", "naira"), ("Kenya", "shilling"), ("Canada", "dollar"), ("Australia", "dollar"),
        ("Germany", "euro"), ("France", "euro"), ("Italy", "euro"), ("Malaysia", "ringgit"),
        ("Bangladesh", "taka"),
    ),
)

SYMBOL = Relation(
    name="symbol",
    causal_template="The chemical symbol for {subject} is",
    masked_template="The chemical symbol for {subject} is [MASK].",
    pairs=(
        ("hydrogen", "H"), ("helium", "He"), ("lithium", "Li"), ("boron", "B"), ("carbon", "C"),
        ("nitrogen", "N"), ("oxygen", "O"), ("fluorine", "F"), ("neon", "Ne"), ("sodium", "Na"),
        ("magnesium", "Mg"), ("silicon", "Si"), ("phosphorus", "P"), ("sulfur", "S"), ("chlorine", "Cl"),
        ("argon", "Ar"), ("potassium", "K"), ("calcium", "Ca"), ("titanium", "Ti"), ("chromium", "Cr"),
        ("manganese", "Mn"), ("iron", "Fe"), ("cobalt", "Co"), ("nickel", "Ni"), ("copper", "Cu"),
        ("zinc", "Zn"), ("silver", "Ag"), ("tin", "Sn"), ("iodine", "I"), ("tungsten", "W"),
        ("platinum", "Pt"), ("gold", "Au"), ("mercury", "Hg"), ("lead", "Pb"), ("uranium", "U"),
    ),
)

CONTINENT = Relation(
    name="continent",
    causal_template="{subject} is a country in",
    masked_template="{subject} is a country in [MASK].",
    pairs=(
        ("France", "Europe"), ("Germany", "Europe"), ("Italy", "Europe"), ("Spain", "Europe"),
        ("Poland", "Europe"), ("Sweden", "Europe"), ("Norway", "Europe"), ("Greece", "Europe"),
        ("Hungary", "Europe"), ("Portugal", "Europe"), ("Japan", "Asia"), ("China", "Asia"),
        ("India", "Asia"), ("Thailand", "Asia"), ("Vietnam", "Asia"), ("South Korea", "Asia"),
        ("Nepal", "Asia"), ("Bangladesh", "Asia"), ("Pakistan", "Asia"), ("Kenya", "Africa"),
        ("Nigeria", "Africa"), ("Ghana", "Africa"), ("Ethiopia", "Africa"), ("Morocco", "Africa"),
        ("Senegal", "Africa"), ("Tanzania", "Africa"), ("Brazil", "South America"),
        ("Argentina", "South America"), ("Peru", "South America"), ("Chile", "South America"),
        ("Colombia", "South America"), ("Venezuela", "South America"), ("Uruguay", "South America"),
        ("Canada", "North America"), ("Mexico", "North America"),
    ),
)

RELATIONS: dict[str, Relation] = {r.name: r for r in (CAPITAL, LANGUAGE, CURRENCY, SYMBOL, CONTINENT)}

"""Date normalisation, a classic sequence-to-sequence task generated in code.

A date is written in one of many surface forms and must be rewritten as ISO 8601:
    "3rd of March 1998", "March 3, 98", "03/03/1998", "Tuesday 3 Mar 1998"  ->  "1998-03-03"
Numeric forms put the day first (03/04/1998 is the 3rd of April). Two-digit years stand for
1950-2049, the range dates are drawn from, so every form has exactly one answer. The weekday in
a form is the true one. Splits are by date: a test date never appears in training, in any form.
"""

import datetime
import random
from collections.abc import Callable

from lmlab.data.pairs import PairSplits, TaskSizes, split_keys

FIRST_DAY, LAST_DAY = datetime.date(1950, 1, 1), datetime.date(2049, 12, 31)
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st, 22nd, 23rd, ..."""
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _month(d: datetime.date, rng: random.Random) -> str:
    """The month's name, full or abbreviated to three letters."""
    name = MONTHS[d.month - 1]
    return name if rng.random() < 0.5 else name[:3]


def _weekday(d: datetime.date, rng: random.Random) -> str:
    name = WEEKDAYS[d.weekday()]
    return name if rng.random() < 0.5 else name[:3]


def _year(d: datetime.date, rng: random.Random) -> str:
    """Four digits, or two (unambiguous for 1950-2049)."""
    return str(d.year) if rng.random() < 0.7 else f"{d.year % 100:02d}"


def _case(text: str, rng: random.Random) -> str:
    """As written, lower case or upper case."""
    return rng.choices([text, text.lower(), text.upper()], weights=[6, 2, 1])[0]


# Each form writes a date with the choices (abbreviations, 2-digit years, case) drawn from rng.
FORMS: list[Callable[[datetime.date, random.Random], str]] = [
    lambda d, r: _case(f"{ordinal(d.day)} of {_month(d, r)} {_year(d, r)}", r),
    lambda d, r: _case(f"{_month(d, r)} {d.day}, {_year(d, r)}", r),
    lambda d, r: _case(f"{_month(d, r)} {ordinal(d.day)}, {_year(d, r)}", r),
    lambda d, r: _case(f"{d.day} {_month(d, r)} {_year(d, r)}", r),
    lambda d, r: _case(f"{_weekday(d, r)} {d.day} {_month(d, r)} {_year(d, r)}", r),
    lambda d, r: _case(f"{_weekday(d, r)}, {_month(d, r)} {d.day}, {_year(d, r)}", r),
    lambda d, r: _case(f"{d.day:02d}-{MONTHS[d.month - 1][:3]}-{_year(d, r)}", r),
    lambda d, r: f"{d.day:02d}/{d.month:02d}/{_year(d, r)}",
    lambda d, r: f"{d.day}/{d.month}/{_year(d, r)}",
    lambda d, r: f"{d.day}.{d.month}.{_year(d, r)}",
    lambda d, r: f"{d.day:02d}.{d.month:02d}.{d.year}",
    lambda d, r: f"{d.year}/{d.month:02d}/{d.day:02d}",
    lambda d, r: f"{d.year}{d.month:02d}{d.day:02d}",
    lambda d, r: _case(f"the {ordinal(d.day)} of {_month(d, r)}, {d.year}", r),
]


def date_form(d: datetime.date, rng: random.Random) -> str:
    """`d` written in a form drawn from FORMS."""
    return rng.choice(FORMS)(d, rng)


def iso(d: datetime.date) -> str:
    """The target: YYYY-MM-DD."""
    return d.isoformat()


def date_task(seed: int = 0, sizes: TaskSizes = TaskSizes()) -> PairSplits:
    """(form, ISO date) pairs in three splits that share no date; the same seed gives the same pairs."""
    rng = random.Random(seed)
    days = [FIRST_DAY + datetime.timedelta(n) for n in range((LAST_DAY - FIRST_DAY).days + 1)]
    train, validation, test = split_keys(days, sizes.held_out_fraction, rng)

    def pairs(dates: list[datetime.date], n: int) -> list[tuple[str, str]]:
        return [(date_form(d, rng), iso(d)) for d in (rng.choice(dates) for _ in range(n))]

    return PairSplits(pairs(train, sizes.train), pairs(validation, sizes.validation), pairs(test, sizes.test))

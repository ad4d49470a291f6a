"""Which regular expressions a tokenizer.json may give the `tokenizers` library, and an untrusted lm-eval task
may give Python's `re`: those that cannot backtrack without bound.

The library runs a Split pre-tokenizer's or a Replace's regex with Oniguruma, a backtracking engine. A
pattern whose repetitions can match the same text in many ways backtracks exponentially when a match
fails: `(a|a)+$` on "a"*23+"b" exceeds Oniguruma's retry limit, which the library turns into a Rust panic,
and just under that limit each start position costs ~0.1 s, so a long text hangs. Those patterns all
repeat something that itself repeats or branches. The safe class, decided on the pattern's structure:

- a repetition (`*`, `+`, `{m,n}`) applies to one character matcher (a character, an escape such as
  `\\s` or `\\p{L}`, a class `[...]`, `.`); a group may only be made optional (`?`, `{0,1}`): `(X)?`
  matches as `(X|)` does, so a repetition inside it counts as one in the branch;
- no backreferences, conditionals or subexpression calls (`\\1`, `(?P=name)`, `\\k<name>`, `\\g<name>`):
  they make matching exponential (or recursive) whatever the repetitions; a group kind the walk does
  not know (`(?(1)…)`, `(?~…)`), a quantifier on a quantifier (`a{2,}*`) and verbose mode (`(?x)`, where
  whitespace and `#` comments are not pattern: `(a+) +` is `(a+)+`) are refused for the same reason;
- at most MAX_UNBOUNDED unbounded repetitions (`*`, `+`, `{m,}`, or more than SMALL_REPEAT) in one
  branch, and after the last of them only parts that can match nothing: each repetition followed by a
  part that can fail multiplies the cost of a failing match by the text's length (`\\s*\\s*\\s*$` took
  2.9 s on 300 spaces, `\\s*\\s*$` 35 s on 3,000).

What the class still lets through is quadratic at worst: one unbounded repetition followed by a part
that fails all along a run, such as `\\s+$` on a long run of spaces (30,000 spaces: 3.4 s; a
3,000-character prompt: 0.05 s).

GPT-2's, Llama-3's, Qwen2's and GPT-4o's split patterns are in the class, and stay fast on long runs of
any kind; `tests/tokenizers/test_regex_checks.py` and `test_file_checks.py` check them.

The two engines read a few things differently, and `syntax` says whose reading to check: Oniguruma's
classes nest (`[a-z&&[^aeiou]]`, `[[:alpha:]]`), where in Python's a `[` inside a class is a literal
(`[[](a+)+b]]` is the class `[[]`, then `(a+)+b`); and Python's `^` (without `(?m)`) and `\\A` match only
at the text's start, so a top-level branch that begins with one is tried at one position, not at each:
it may hold one more unbounded repetition before a part that can fail (MMLU's `^(.*?)\\s*$`), the cost
staying quadratic. Where they differ otherwise, the walk takes the more dangerous reading: `a{,}` is
`a*` in Python and counts as unbounded for both. lm-eval's own tasks'
patterns (gsm8k's `#### (\\-?[0-9\\.\\,]+)`, …) are in the class; `tests/eval/test_task_patterns.py` checks them.
"""

import re

MAX_UNBOUNDED = 2  # Llama-3's ` ?[^\s\p{L}\p{N}]+[\r\n]*` and `\s*[\r\n]+` have two
SMALL_REPEAT = 16  # `\p{N}{1,3}` counts as bounded; `a{0,1000}` as unbounded
_QUANTIFIER = re.compile(r"[*+?]|\{(\d*)(,?)(\d*)\}")  # a `{...}` that is not one of these is a literal
_BACKREFERENCE = re.compile(r"\\([1-9]|k<|k'|g<|g')|\(\?P=")
# (?<=…) (?<name>…) (?P<name>…) (?=…) (?>…) (?i:…); group 2 holds the options of (?i:…)
_GROUP_KIND = re.compile(r"\?(<[=!]|<\w+>|P<\w+>|'\w+'|[=!>]|([aiLmsux-]*):)")
_OPTIONS = re.compile(r"\?([aiLmsux-]*)\)|\?#[^)]*\)")  # (?i) sets options for the rest; (?#…) is a comment
_MULTILINE = re.compile(r"\(\?[aiLmsux]*m")  # (?m) or (?m:…): Python's `^` then matches at each line


class UnsafeRegex(ValueError):
    """A pattern outside the safe class; the message says which part and why."""


def check_regex(pattern: str, syntax: str = "oniguruma") -> None:
    """Raise UnsafeRegex unless `pattern`, read as `syntax` ("oniguruma" or "python") reads it, is in the
    safe class above."""
    if _BACKREFERENCE.search(pattern.replace("\\\\", "")):
        raise UnsafeRegex("it uses a backreference or subexpression call (\\1, (?P=…), \\k<…>, \\g<…>)")
    python = syntax == "python"
    parser = _Parser(pattern, nested_classes=not python,
                     anchors=("\\A", "^") if python and not _MULTILINE.search(pattern) else ())
    try:
        parser.branches(0)
    except RecursionError:
        raise UnsafeRegex("it nests groups or classes hundreds deep") from None
    if parser.at < len(pattern):
        raise UnsafeRegex("it closes a group it never opened")


class _Parser:
    """A recursive-descent walk over Oniguruma's syntax (or Python's: classes that do not nest, `anchors`
    that match only at the text's start) that knows atoms, groups, alternation and quantifiers, which is
    all the class needs. Each branch is walked with the count of unbounded
    repetitions before it (`before`), so a group's branches are judged where the group stands."""

    def __init__(self, pattern: str, nested_classes: bool, anchors: tuple[str, ...]):
        self.text, self.at, self.nested_classes, self.anchors = pattern, 0, nested_classes, anchors
        self.depth = 0  # groups open around `at`

    def branches(self, before: int) -> tuple[int, bool]:
        """Parse alternatives up to a `)` or the end: (the most unbounded repetitions through any one,
        counting `before`; whether some branch can match the empty text)."""
        most, empty = self.sequence(before)
        while self._peek() == "|":
            self.at += 1
            count, can_be_empty = self.sequence(before)
            most, empty = max(most, count), empty or can_be_empty
        return most, empty

    def sequence(self, before: int) -> tuple[int, bool]:
        """Parse one branch: (unbounded repetitions through it, counting `before`; whether it can match
        the empty text). After the last repetition allowed, a part that can fail would make a failing
        match cost the text's length to that power at each position (`\\s*\\s*\\S`: 1.7 s on 1,000
        spaces), so only parts that can match nothing may follow it."""
        count, empty = before, True
        if self.depth == 0 and any(self.text.startswith(anchor, self.at) for anchor in self.anchors):
            count -= 1  # tried at the text's start only: one more repetition costs what one start per position does
        while self.at < len(self.text) and self._peek() not in "|)":
            earlier = count
            if self._quantifier() is not None:
                raise UnsafeRegex("it repeats a repetition (a quantifier follows a quantifier)")
            is_group, count, can_be_empty = self._atom(count)
            bounds = self._quantifier()
            if bounds is not None and is_group and bounds[1] != 1:
                raise UnsafeRegex("it repeats a group (only `?` may apply to a group; repeat single characters)")
            if bounds is not None:
                count += bounds[1] is None or bounds[1] > SMALL_REPEAT
                can_be_empty = can_be_empty or bounds[0] == 0
            if count > MAX_UNBOUNDED:
                raise UnsafeRegex(f"one of its branches repeats {count} parts without bound (at most {MAX_UNBOUNDED})")
            if earlier == MAX_UNBOUNDED > before and not can_be_empty:  # (a group is judged where it stands)
                raise UnsafeRegex(f"a part that can fail follows {MAX_UNBOUNDED} unbounded repetitions")
            empty = empty and can_be_empty
        return count, empty

    def _atom(self, before: int) -> tuple[bool, int, bool]:
        """Parse one atom: (whether it is a group, the unbounded repetitions through it counting `before`,
        whether it can match the empty text: a lookaround or an anchor can fail, so it cannot)."""
        char = self.text[self.at]
        if char == "(":
            options = _OPTIONS.match(self.text, self.at + 1)
            if options:
                _refuse_verbose(options[1])
                self.at = options.end()
                return False, before, True
            kind = _GROUP_KIND.match(self.text, self.at + 1)
            if kind is None and self.text.startswith("?", self.at + 1):
                raise UnsafeRegex(f"it uses a group kind the check does not read ({self.text[self.at:self.at + 4]}…)")
            _refuse_verbose(kind[2] if kind else None)
            self.at = kind.end() if kind else self.at + 1
            lookaround = kind is not None and kind[1] in ("=", "!", "<=", "<!")
            self.depth += 1
            inner, can_be_empty = self.branches(before)
            self.depth -= 1
            if self._peek() != ")":
                raise UnsafeRegex("it has an unclosed group")
            self.at += 1
            return True, inner, can_be_empty and not lookaround
        if char == "[":
            self.at = self._class_end(self.at) + 1
        elif char == "\\":
            self.at = self._escape_end(self.at)
        else:
            self.at += 1
        return False, before, False

    def _quantifier(self) -> tuple[int, int | None] | None:
        """Parse a quantifier (and a lazy `?` or possessive `+` after it): (min, max or None), or None."""
        found = _QUANTIFIER.match(self.text, self.at)
        if not found or found[0] == "{}":  # `{,}` is `*` in Python (a literal in Oniguruma: read the worse)
            return None
        self.at = found.end()
        if self._peek() in ("?", "+"):
            self.at += 1
        if found[0] in "*+?":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[found[0]]
        low = int(found[1] or 0)
        if not found[2]:
            return low, low
        return low, int(found[3]) if found[3] else None

    def _class_end(self, start: int) -> int:
        """The index of the `]` that closes the class opened at `start` (classes nest in Oniguruma; in
        Python a `[` inside a class is a literal)."""
        at = start + 1 + (self.text.startswith("^", start + 1))
        at += self.text.startswith("]", at)  # a `]` first is a literal
        while at < len(self.text):
            char = self.text[at]
            if char == "\\":
                at = self._escape_end(at)
                continue
            if char == "[" and self.nested_classes:
                at = (self.text.index(":]", at) + 2 if self.text.startswith("[:", at) and ":]" in self.text[at:]
                      else self._class_end(at) + 1)
                continue
            if char == "]":
                return at
            at += 1
        raise UnsafeRegex("it has an unclosed character class")

    def _escape_end(self, start: int) -> int:
        """The index just after the escape starting at `start` (`\\p{L}`, `\\x{41}`, `\\u0041`, `\\n`)."""
        if start + 1 >= len(self.text):
            raise UnsafeRegex("it ends in a lone backslash")
        kind = self.text[start + 1]
        if kind in "pPx" and self.text.startswith("{", start + 2):
            return self._closing("}", start + 2) + 1
        return start + 2

    def _closing(self, char: str, start: int) -> int:
        """The index of the next `char` from `start`."""
        end = self.text.find(char, start)
        if end < 0:
            raise UnsafeRegex(f"it has an unclosed {self.text[start]}")
        return end

    def _peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""


def _refuse_verbose(options: str | None) -> None:
    """Refuse options (`i`, `x-i`, …) that turn on verbose mode: whitespace and comments would not be pattern."""
    if options and "x" in options.partition("-")[0]:
        raise UnsafeRegex("it turns on verbose mode (?x), whose whitespace and comments the check does not read")

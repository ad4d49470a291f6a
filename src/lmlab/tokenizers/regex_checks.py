"""Which regular expressions a tokenizer.json may give the `tokenizers` library: those that cannot backtrack
without bound.

The library runs a Split pre-tokenizer's or a Replace's regex with Oniguruma, a backtracking engine. A
pattern whose repetitions can match the same text in many ways backtracks exponentially when a match
fails: `(a|a)+$` on "a"*23+"b" exceeds Oniguruma's retry limit, which the library turns into a Rust panic,
and just under that limit each start position costs ~0.1 s, so a long text hangs. Those patterns all
repeat something that itself repeats or branches. The safe class, decided on the pattern's structure:

- a repetition (`*`, `+`, `{m,n}`) applies to one character matcher (a character, an escape such as
  `\\s` or `\\p{L}`, a class `[...]`, `.`); a group may only be made optional (`?`, `{0,1}`);
- no backreferences or subexpression calls (`\\1`, `\\k<name>`, `\\g<name>`): they make matching
  exponential (or recursive) whatever the repetitions;
- at most MAX_UNBOUNDED unbounded repetitions (`*`, `+`, `{m,}`, or more than SMALL_REPEAT) in one
  branch: each one multiplies the cost of a failing match by the text's length.

Every published tokenizer's pattern is in the class (GPT-2's, Llama-3's, Qwen2's, GPT-4o's, DeepSeek's
lists of ranges); `tests/tokenizers/test_regex_checks.py` checks them.
"""

import re

MAX_UNBOUNDED = 2  # Llama-3's ` ?[^\s\p{L}\p{N}]+[\r\n]*` and `\s*[\r\n]+` have two
SMALL_REPEAT = 16  # `\p{N}{1,3}` counts as bounded; `a{0,1000}` as unbounded
_QUANTIFIER = re.compile(r"[*+?]|\{(\d*)(,?)(\d*)\}")  # a `{...}` that is not one of these is a literal
_BACKREFERENCE = re.compile(r"\\([1-9]|k<|k'|g<|g')")
_GROUP_KIND = re.compile(r"\?(<[=!]|<\w+>|'\w+'|[=!>]|[imx-]*:)")  # (?<=…) (?<name>…) (?=…) (?>…) (?i:…)
_OPTIONS = re.compile(r"\?[imx-]*\)|\?#[^)]*\)")  # (?i) sets options for the rest; (?#…) is a comment


class UnsafeRegex(ValueError):
    """A pattern outside the safe class; the message says which part and why."""


def check_regex(pattern: str) -> None:
    """Raise UnsafeRegex unless `pattern` is in the safe class above."""
    if _BACKREFERENCE.search(pattern.replace("\\\\", "")):
        raise UnsafeRegex("it uses a backreference or subexpression call (\\1, \\k<…>, \\g<…>)")
    parser = _Parser(pattern)
    unbounded = parser.branches()
    if parser.at < len(pattern):
        raise UnsafeRegex("it closes a group it never opened")
    if unbounded > MAX_UNBOUNDED:
        raise UnsafeRegex(f"one of its branches repeats {unbounded} parts without bound (at most {MAX_UNBOUNDED})")


class _Parser:
    """A recursive-descent walk over Oniguruma's syntax that knows atoms, groups, alternation and
    quantifiers, which is all the class needs."""

    def __init__(self, pattern: str):
        self.text, self.at = pattern, 0

    def branches(self) -> int:
        """Parse alternatives up to a `)` or the end; the most unbounded repetitions in any one."""
        most = self.sequence()
        while self._peek() == "|":
            self.at += 1
            most = max(most, self.sequence())
        return most

    def sequence(self) -> int:
        """Parse one branch; the unbounded repetitions in it (a group counts its worst branch)."""
        count = 0
        while self.at < len(self.text) and self._peek() not in "|)":
            is_group, inner = self._atom()
            bounds = self._quantifier()
            if bounds is None:
                count += inner
            elif is_group and bounds[1] != 1:
                raise UnsafeRegex("it repeats a group (only `?` may apply to a group; repeat single characters)")
            elif is_group and inner:
                raise UnsafeRegex("it makes optional a group that repeats (a repetition inside a repetition)")
            else:
                count += bounds[1] is None or bounds[1] > SMALL_REPEAT
        return count

    def _atom(self) -> tuple[bool, int]:
        """Parse one atom: (whether it is a group, the unbounded repetitions inside it)."""
        char = self.text[self.at]
        if char == "(":
            options = _OPTIONS.match(self.text, self.at + 1)
            if options:
                self.at = options.end()
                return False, 0
            kind = _GROUP_KIND.match(self.text, self.at + 1)
            self.at = kind.end() if kind else self.at + 1
            inner = self.branches()
            if self._peek() != ")":
                raise UnsafeRegex("it has an unclosed group")
            self.at += 1
            return True, inner
        if char == "[":
            self.at = self._class_end(self.at) + 1
        elif char == "\\":
            self.at = self._escape_end(self.at)
        else:
            self.at += 1
        return False, 0

    def _quantifier(self) -> tuple[int, int | None] | None:
        """Parse a quantifier (and a lazy `?` or possessive `+` after it): (min, max or None), or None."""
        found = _QUANTIFIER.match(self.text, self.at)
        if not found or (found[0].startswith("{") and not (found[1] or found[3])):
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
        """The index of the `]` that closes the class opened at `start` (classes nest in Oniguruma)."""
        at = start + 1 + (self.text.startswith("^", start + 1))
        at += self.text.startswith("]", at)  # a `]` first is a literal
        while at < len(self.text):
            char = self.text[at]
            if char == "\\":
                at = self._escape_end(at)
                continue
            if char == "[":
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

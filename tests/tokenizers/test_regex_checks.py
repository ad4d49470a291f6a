"""The safe class of tokenizer regexes: every published tokenizer's Split pattern is in it, and the
patterns that backtrack without bound in Oniguruma are not."""

import pytest

from lmlab.tokenizers.regex_checks import UnsafeRegex, check_regex
from published_tokenizers import PUBLISHED

# Oniguruma syntax the class reads: a POSIX bracket, a `{` that is a literal, a one-repetition branch with a
# tail that can fail (quadratic at worst: 3.4 s on 30,000 spaces), option and comment groups, named groups
SYNTAX = {"posix_class": r"[[:alpha:]]+", "literal_brace": r"a{b", "trailing_space": r"\s+$",
          "options": r"(?i)abc(?#note)d", "named_group": r"(?<word>\w+)", "nested_class": r"[a-z&&[^aeiou]]+",
          "optional_group_that_repeats": r"(a+)?b"}  # matches as (a+|)b: one repetition in the branch


@pytest.mark.parametrize("pattern", list(PUBLISHED.values()) + list(SYNTAX.values()), ids=[*PUBLISHED, *SYNTAX])
def test_published_patterns_are_in_the_safe_class(pattern):
    check_regex(pattern)


# Measured with tokenizers 0.23 on a Split pre-tokenizer: `(a|a)+$` panics (Oniguruma's retry limit) at
# "a"*23+"b" and takes 0.06 s per start position just below it; `\s*\s*\s*$` takes 2.9 s on 300 spaces.
UNSAFE = {
    "alternation_repeated": (r"(a|a)+$", "repeats a group"),
    "nested_repetition": (r"(a+)+$", "repeats a group"),
    "repeated_dot_star_group": (r"(.*a){20}", "repeats a group"),
    "quantifier_on_quantifier": (r"a{2,}*", "repeats a repetition"),  # (?:a{2,})* in Oniguruma
    "verbose_mode": (r"(?x)(a+) +$", "verbose mode"),  # whitespace is not pattern: (a+)+$
    "verbose_scoped": (r"(?ix:(a+) +)$", "verbose mode"),
    "unknown_group_kind": (r"(?~a)", "group kind"),  # Oniguruma's absent operator
    "three_unbounded_in_a_branch": (r"\s*\s*\s*$", "3 parts without bound"),
    "anchor_after_two_unbounded": (r"\s*\s*$", "can fail follows 2 unbounded"),  # 35 s on 3,000 spaces
    "class_after_two_unbounded": (r"\s*\s*\S", "can fail follows 2 unbounded"),  # 1.7 s on 1,000 spaces
    "lookahead_after_two_unbounded": (r"\s*\s*(?!\S)", "can fail follows 2 unbounded"),
    "failing_part_inside_a_group": (r"\s*(?:\s*\S)", "can fail follows 2 unbounded"),
    "large_bounded_repeats": (r"a{0,1000}b{0,1000}c{0,1000}", "3 parts without bound"),
    "backreference": (r"(a*)\1", "backreference"),
    "named_backreference": (r"(?<x>a)\k<x>", "backreference"),
    "subexpression_call": (r"(?<x>a|\(\g<x>\))", "backreference"),
    "unclosed_group": (r"(ab", "unclosed group"),
    "unclosed_class": (r"[ab", "unclosed character class"),
    "stray_close": (r"a)(a+)+", "never opened"),
    "deep_groups": ("(" * 2000 + "a" + ")" * 2000, "hundreds deep"),
    "deep_classes": ("[" * 2000 + "a" + "]" * 2000, "hundreds deep"),
}


@pytest.mark.parametrize("name", UNSAFE)
def test_patterns_that_backtrack_without_bound_are_refused(name):
    pattern, reason = UNSAFE[name]
    with pytest.raises(UnsafeRegex, match=reason):
        check_regex(pattern)


# Python's `re` reads a few things differently (lm-eval tasks' patterns are checked as `syntax="python"`):
# a `[` inside a class is a literal, `{,}` is `*`, `(?P=name)` is a backreference, `^` anchors at the start
PYTHON_SAFE = {
    "named_group": r"(?P<x>\d+)",
    "dotall_then_repeat": r"(?s).*#### ",
    "anchored_lazy_then_spaces": r"^(.*?)\s*$",  # MMLU generative's: tried at the text's start only
    "anchored_second_branch": r"a+b|\A\s*\s*x",
    "lookbehind_then_any": r"(?<=the answer is )(.*)(?=.)",
}
PYTHON_UNSAFE = {
    "bracket_is_literal": (r"[[](a+)+b]]", "repeats a group"),  # the class [[], then (a+)+b
    "empty_brace_is_star": (r"(a|a){,}$", "repeats a group"),
    "named_backreference": (r"(?P<n>a+)(?P=n)", "backreference"),
    "conditional": (r"(a)?(?(1)a|b)", "group kind"),
    "multiline_is_not_anchored": (r"(?m)^(.*?)\s*$", "can fail follows 2 unbounded"),
    "anchor_inside_a_group": (r"(^\s*\s*x)", "can fail follows 2 unbounded"),
    "anchored_three_unbounded": (r"^a*b*c*x", "can fail follows 2 unbounded"),
}


@pytest.mark.parametrize("pattern", list(PYTHON_SAFE.values()), ids=list(PYTHON_SAFE))
def test_python_patterns_in_the_safe_class(pattern):
    check_regex(pattern, syntax="python")


@pytest.mark.parametrize("name", PYTHON_UNSAFE)
def test_python_patterns_that_backtrack_without_bound_are_refused(name):
    pattern, reason = PYTHON_UNSAFE[name]
    with pytest.raises(UnsafeRegex, match=reason):
        check_regex(pattern, syntax="python")


def test_anchors_are_python_s_reading_only():
    """Oniguruma's `^` is a line anchor, so an Oniguruma pattern gets no allowance for it."""
    with pytest.raises(UnsafeRegex, match="can fail follows 2 unbounded"):
        check_regex(r"^(.*?)\s*$")

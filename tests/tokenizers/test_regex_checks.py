"""The safe class of tokenizer regexes: every published tokenizer's Split pattern is in it, and the
patterns that backtrack without bound in Oniguruma are not."""

import pytest

from lmlab.tokenizers.regex_checks import UnsafeRegex, check_regex

from published_tokenizers import PUBLISHED


# Oniguruma syntax the class reads: a POSIX bracket, a `{` that is a literal, a one-repetition branch with a
# tail that can fail (quadratic at worst: 3.4 s on 30,000 spaces), option and comment groups, named groups
SYNTAX = {"posix_class": r"[[:alpha:]]+", "literal_brace": r"a{b", "trailing_space": r"\s+$",
          "options": r"(?i)abc(?#note)d", "named_group": r"(?<word>\w+)", "nested_class": r"[a-z&&[^aeiou]]+"}


@pytest.mark.parametrize("pattern", list(PUBLISHED.values()) + list(SYNTAX.values()), ids=[*PUBLISHED, *SYNTAX])
def test_published_patterns_are_in_the_safe_class(pattern):
    check_regex(pattern)


# Measured with tokenizers 0.23 on a Split pre-tokenizer: `(a|a)+$` panics (Oniguruma's retry limit) at
# "a"*23+"b" and takes 0.06 s per start position just below it; `\s*\s*\s*$` takes 2.9 s on 300 spaces.
UNSAFE = {
    "alternation_repeated": (r"(a|a)+$", "repeats a group"),
    "nested_repetition": (r"(a+)+$", "repeats a group"),
    "repeated_dot_star_group": (r"(.*a){20}", "repeats a group"),
    "optional_group_that_repeats": (r"(a+)?b", "repetition inside a repetition"),
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

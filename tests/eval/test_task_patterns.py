"""The regexes of lm-eval's own tasks (filters' `regex_pattern`, `regexes_to_ignore`) are in the safe class
`lmlab eval harness` holds untrusted tasks to, so copies of those tasks run without --trust-task-code."""

import shutil
from pathlib import Path

import pytest
import yaml

from lmlab.tokenizers.regex_checks import UnsafeRegex, check_regex

lm_eval = pytest.importorskip("lm_eval")
from lmlab.eval.task_files import PATTERN_KEYS, task_code  # noqa: E402

TASKS = Path(lm_eval.__file__).parent / "tasks"
SAMPLE = ["gsm8k/gsm8k.yaml", "gsm8k/gsm8k-cot.yaml", "gsm8k/gsm8k-cot-zeroshot.yaml", "mgsm/direct/direct_yaml",
          "mgsm/en_cot/cot_yaml", "mmlu/generative/_default_template_yaml", "mmlu_pro/_default_template_yaml",
          "bbh/cot_fewshot/_cot_fewshot_template_yaml", "bbh/zeroshot/_zeroshot_template_yaml",
          "gpqa/cot_zeroshot/_gpqa_cot_zeroshot_yaml", "kmmlu/direct/_direct_kmmlu_yaml",
          "afrimgsm/direct/prompt_1/afrimgsm_yaml", "afrimmlu/direct/prompt_1/afrimmlu_direct"]
# lm-eval's own tasks whose patterns the structural check cannot prove bounded (two unbounded repetitions,
# then a part that can fail, kept apart only by what their classes match): they need --trust-task-code
NEED_TRUST = {
    "kmmlu/cot_hard/_cot_kmmlu_yaml": r"(?<=정답은)\s*[(]?(A|B|C|D)[)]?.*(?=입니다.)",
    "basque_bench/mgsm_native_cot_eu.yaml": r"Erantzuna [$%]? ?(-?[0-9]+([ .,][0-9.,]+)?) ?[$%]? da",
    "global_piqa/parallel_generation/_template": r"[Tt]he (?:[Bb]est [Aa]nswer|[Ff]inal [Aa]nswer|[Aa]nswer)"
                                                 r"[^A-D]*([A-D])|[Aa]nswer\s*:[^A-D]*([A-D])|\\boxed\{([A-D])\}",
    "global_piqa/nonparallel_generation/_template": r"[Tt]he (?:[Bb]est [Aa]nswer|[Ff]inal [Aa]nswer|[Aa]nswer)"
                                                    r"[^A-B]*([A-B])|[Aa]nswer\s*:[^A-B]*([A-B])|\\boxed\{([A-B])\}",
}


class _AnyTag(yaml.SafeLoader):
    """Reads lm-eval's YAMLs, a `!function` as None: only the patterns matter here."""


_AnyTag.add_multi_constructor("!", lambda loader, suffix, node: None)


def patterns(data) -> list[str]:
    """Every string under a PATTERN_KEYS key in `data`, wherever it nests."""
    found, stack = [], [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key in PATTERN_KEYS:
                found += [value[key]] if isinstance(value.get(key), str) else value.get(key) or []
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


def sample_patterns() -> dict[str, str]:
    """pattern -> the sample file it is first found in."""
    found = {}
    for name in SAMPLE:
        for pattern in patterns(yaml.load((TASKS / name).read_text(), Loader=_AnyTag)):
            found.setdefault(pattern, name)
    return found


def test_sample_holds_the_well_known_patterns():
    assert {r"#### (\-?[0-9\.\,]+)", r"The answer is (\-?[0-9\.\,]+).", r"(-?[$0-9.,]{2,})|(-?[0-9]+)",
            r"^(.*?)\s*$", r"(?s).*#### "} <= set(sample_patterns())


@pytest.mark.parametrize("pattern", list(sample_patterns()))
def test_lm_eval_task_patterns_are_in_the_safe_class(pattern):
    check_regex(pattern, syntax="python")


@pytest.mark.parametrize("name", NEED_TRUST)
def test_patterns_the_check_cannot_prove_need_trust(name):
    assert NEED_TRUST[name] in patterns(yaml.load((TASKS / name).read_text(), Loader=_AnyTag))
    with pytest.raises(UnsafeRegex):
        check_regex(NEED_TRUST[name], syntax="python")


def test_gsm8k_copy_passes_the_trust_check(tmp_path):
    """gsm8k.yaml (no code; two regex filters and exact_match's regexes_to_ignore) as an --include-path task."""
    shutil.copy(TASKS / "gsm8k/gsm8k.yaml", tmp_path)
    assert task_code(tmp_path, {"exact_match"}) == {}

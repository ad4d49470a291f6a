"""Fuzz: chat templates whose one filter, global or method call costs more than linear time or memory
(wordwrap of a long word, lipsum, strip with a long set of characters, a string or a generator made
into millions of objects, millions of slices), fed to `lmlab chat` through tokenizer_config.json.

Each must end in one `lmlab: error:` line within BOMB_SECONDS (the template budget is 5 s; the clock
is only read between steps, so no one step may run long) and raise the process's peak memory by
less than BOMB_MEMORY_MB; the small, real uses of the same filters still render.
"""

import json
import resource
import shutil

import pytest

from fuzz.inputs import chat_tokenizer, save_model_dir, tiny_decoder
from fuzz.record import fuzz_report, probe  # noqa: F401 (fuzz_report: the session's report)

pytestmark = pytest.mark.usefixtures("one_thread")

BOMB_SECONDS = 6.0
BOMB_MEMORY_MB = 400
BOMBS = {
    "wordwrap_issue": "{{ ('x' * 2400000) | wordwrap(1) | length }}",
    "wordwrap_1500000": "{{ ('x' * 1500000) | wordwrap(1) }}",
    "wordwrap_long_word": "{{ ('x' * 200000) | wordwrap(1) | length }}",
    "wordwrap_many_words": "{{ ('x ' * 600000) | wordwrap(1) | length }}",
    "wordwrap_width_zero": "{{ 'x y' | wordwrap(0) }}",
    "lipsum_issue": "{{ lipsum(n=100000) | length }}",
    "lipsum_default": "{{ lipsum() }}",
    "trim_chars": "{{ ('a' * 2500000) | trim('b' * 2500000 ~ 'a') | length }}",
    "strip_chars": "{{ ('a' * 2500000).strip('b' * 2500000 ~ 'a') | length }}",
    "lstrip_chars": "{{ ('a' * 2500000).lstrip('b' * 2500000 ~ 'a') | length }}",
    "rstrip_chars": "{{ ('a' * 2500000).rstrip('b' * 2500000 ~ 'a') | length }}",
    "list_of_characters": "{{ ('中' * 2000000) | list | length }}",
    "sort_characters": "{{ ('中' * 2000000) | sort | length }}",
    "unique_characters": "{{ ('中' * 4000000) | unique | list | length }}",
    "groupby_characters": "{{ ('中' * 2000000) | groupby(0) | length }}",
    "batch_characters": "{{ ('x' * 2000000) | batch(1) | list | length }}",
    "title_words": "{{ ('x ' * 2000000) | title | length }}",
    "wordcount_words": "{{ ('中 ' * 2400000) | wordcount }}",
    "join_filter_characters": "{{ ('中' * 2000000) | join(',') | length }}",
    "join_method_characters": "{{ ','.join('中' * 2000000) | length }}",
    "split_whitespace": "{{ ('中 ' * 2000000).split() | length }}",
    "split_separator": "{{ ('中,' * 2000000).split(',') | length }}",
    "splitlines": "{{ ('中\\n' * 2000000).splitlines() | length }}",
    "slice_many": "{{ [1] | slice(3000000) | list | length }}",
    "slice_filled": "{{ [1] | slice(1000000, 'xxxxx') | list | length }}",
    "batch_filled": "{{ [1] | batch(1000000000, 'x') | list | length }}",
    "select_generator_max": "{{ ('x' * 4000000) | select | max }}",
    "map_generator_max": "{{ ('x' * 4000000) | map('upper') | max }}",
    "select_generator_list": "{{ ('x' * 4000000) | select | list | length }}",
    "select_generator_reverse": "{{ ('x' * 4000000) | select | reverse | first }}",
    "select_generator_join": "{{ ('x' * 4000000) | select | join | length }}",
}
FINE = {  # the same filters as real templates use them: they render
    "wordwrap_small": "{{ 'hello wide world' | wordwrap(5) }}{{ messages[0]['content'] }}",
    "trim_small": "{{ '  hi  ' | trim }}{{ '--x--' | trim('-') }}{{ messages[0]['content'] }}",
    "list_small": "{{ 'abc' | list | sort | join(',') }}{{ messages[0]['content'].split() | length }}",
    "select_small": "{{ range(10) | select('odd') | list }}{{ messages[0]['content'] | title }}",
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tokenizer = chat_tokenizer()
    return save_model_dir(tmp_path_factory.mktemp("filters") / "llama", tiny_decoder("llama", tokenizer.vocab_size),
                          tokenizer)


def chat_with(model_dir, tmp_path, template: str) -> list:
    directory = shutil.copytree(model_dir, tmp_path / "m")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": template}))
    return ["chat", "--model", directory, "--prompt", "What is 2 + 3?", "--greedy", "--max-new-tokens", "2"]


def peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


@pytest.mark.parametrize("name", BOMBS)
def test_filter_bomb_is_refused_quickly(model_dir, tmp_path, name):
    before = peak_mb()
    outcome = probe("template_filters", name, chat_with(model_dir, tmp_path, BOMBS[name]), None,
                    timeout=BOMB_SECONDS)
    assert outcome.kind == "clean_error", outcome.detail
    assert peak_mb() - before < BOMB_MEMORY_MB


@pytest.mark.parametrize("name", FINE)
def test_small_use_of_the_same_filters_renders(model_dir, tmp_path, name):
    probe("template_filters", name, chat_with(model_dir, tmp_path, FINE[name]), None, may_change=True,
          must_succeed=True)

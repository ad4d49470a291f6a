"""Fuzz: lm-eval task folders that try to run code without --trust-task-code, fed to `lmlab eval harness`.

Every way a task YAML makes lm-eval import Python: the `!function` tag in any spelling (a `%TAG`
shorthand, `%xx` escapes, a verbatim tag, behind an alias or a merge key, on a key), any other tag,
an include outside --include-path (absolute, relative, through a symlink or a merge key) or one
that holds code, and a metric lm-eval would fetch from the HF evaluate library; then YAML bombs
(aliases, size, nesting, recursion, a FIFO or a device for a file), regexes that backtrack without
bound wherever lm-eval takes one, and templates that reach into Python, blow up or fail when lm-eval
renders them. Each folder holds `evil.py`, which writes a marker file when imported: it must never be
written, and each case must end in one `lmlab: error:` line. The plain-data folders and real tasks'
regexes are accepted, and a plain task gives the same numbers as when trusted.
"""

import json
import os
import resource
import shutil

import pytest

from fuzz.inputs import chat_tokenizer, save_model_dir, tiny_decoder
from fuzz.oracle import run_cli
from fuzz.record import fuzz_report, probe  # noqa: F401 (fuzz_report: the session's report)

lm_eval = pytest.importorskip("lm_eval")
from lmlab.eval import task_files  # noqa: E402
from lmlab.eval.task_files import task_code  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

EVIL = "from pathlib import Path\nPath(__file__).with_name('MARKER').write_text('ran')\n\ndef f(**kwargs):\n    pass\n"
FUNCTION = "!function evil.f"
# case -> the task YAML (t.yaml); "{other}" is a folder beside --include-path holding base.yaml with a !function
CODE = {
    "function_plain": f"task: t\ncustom_dataset: {FUNCTION}\n",
    "tag_directive": "%TAG !x! !fun\n---\ntask: t\ncustom_dataset: !x!ction evil.f\n",
    "tag_primary_handle": "%TAG ! !fun\n---\ntask: t\ncustom_dataset: !ction evil.f\n",
    "uri_escape": "task: t\ncustom_dataset: !fun%63tion evil.f\n",
    "uri_escape_all": "task: t\ncustom_dataset: !%66%75%6e%63%74%69%6f%6e evil.f\n",
    "verbatim_tag": "task: t\ncustom_dataset: !<!function> evil.f\n",
    "flow_style": f"{{task: t, custom_dataset: {FUNCTION}}}\n",
    "behind_alias": f"task: t\nbase: &a {FUNCTION}\nprocess_docs: *a\n",
    "merge_key": f"task: t\n<<: {{custom_dataset: {FUNCTION}}}\n",
    "tag_on_key": f"task: t\n? {FUNCTION}\n: 1\n",
    "nested_in_list": f"task: t\nmetric_list:\n  - metric: {FUNCTION}\n",
    "class_key": "task: t\nclass: !function evil.Task\n",
    "python_tag": "task: t\nx: !!python/object/apply:os.system ['true']\n",
    "unknown_local_tag": "task: t\nx: !whatever 1\n",
    "unknown_global_tag": "task: t\nx: !<tag:example.com,2024:code> 1\n",
    "include_absolute_outside": "task: t\ninclude: {other}/base.yaml\n",
    "include_relative_outside": "task: t\ninclude: ../other/base.yaml\n",
    "include_symlink_outside": "task: t\ninclude: link.txt\n",
    "include_inside_with_code": "task: t\ninclude: inner.txt\n",
    "include_chain_with_code": "task: t\ninclude: chain.txt\n",
    "include_list_with_code": "task: t\ninclude: [plain.txt, inner.txt]\n",
    "include_cycle_with_code": "task: t\ninclude: cycle.txt\n",
    "include_via_merge_key": "task: t\n<<: {include: ../other/base.yaml}\n",
    "metric_unknown": "task: t\nmetric_list:\n  - metric: {root}/evil.py\n",
    "metric_hf_evaluate": "task: t\nmetric_list:\n  - metric: exact_match\n    hf_evaluate: true\n",
    "metric_in_inline_group": "group: g\ntask:\n  - task: t\n    metric_list:\n      - metric: evil_metric\n",
    "metric_in_omap": "task: t\nmetric_list: !!omap [x: {metric: evil_metric}]\n",
}
BOMBS = {  # not code, but no task YAML needs them: refused with their own error
    "billion_laughs": "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
    "recursive_alias": "task: t\nx: &a [*a]\n",
    "deep_nesting": "task: t\nx: " + "[" * 100_000 + "]" * 100_000 + "\n",  # libyaml's composer would crash
    "deep_through_aliases": "".join(f"a{i}: &a{i} " + "[" * 60 + (f"*a{i - 1}" if i else "x") + "]" * 60 + "\n"
                                    for i in range(40)),
    "huge_file": "task: t\nx: " + "y" * 1_100_000 + "\n",
    "not_yaml": "task: t\nx: [unclosed\n",
    "two_documents": "task: t\n---\ntask: u\n",
}
DATA = {  # plain data in every form the check must still accept
    "plain": "task: t\ndataset_path: json\n",
    "core_tags": "task: !!str t\nn: !!int 3\nf: !!float 1.5\nb: !!bool true\nz: !!null ''\nd: 2024-01-01\n",
    "non_specific_tag": "task: ! t\n",
    "anchors_and_merge": "base: &b {output_type: multiple_choice}\ntask: t\n<<: *b\n",
    "include_inside": "task: t\ninclude: plain.txt\n",
    "include_missing": "task: t\ninclude: nowhere.yaml\n",
    "known_metrics": "task: t\nmetric_list:\n  - metric: acc\n  - metric: exact_match\n",
    "function_in_a_string": "task: t\ndoc_to_text: 'write !function here'\n",
    "include_not_a_path": "task: t\ninclude: [5, {a: 1}, null]\n",
    "include_nul": 'task: t\ninclude: "plain\\0.txt"\n',
    "include_symlink_loop": "task: t\ninclude: loop1.txt\n",
    "include_shared": "task: t\ninclude: [plain.txt, plain.txt, chain_plain.txt]\n",
}


def _filter(function: str, key: str, value) -> dict:
    """A task's filter_list with the one filter `function` given `key`: `value`."""
    return {"filter_list": [{"name": "f", "filter": [{"function": function, key: value}, {"function": "take_first"}]}]}


# where a task hands Python's `re` a regex -> (the key, the task's settings with `pattern` there)
REGEX_PLACES = {
    "regex_filter": ("regex_pattern", lambda pattern: _filter("regex", "regex_pattern", pattern)),
    "regex_pos_filter": ("regex_pattern", lambda pattern: _filter("regex_pos", "regex_pattern", pattern)),
    "multi_choice_filter": ("regex_pattern", lambda pattern: _filter("multi_choice_regex", "regex_pattern", pattern)),
    "multi_choice_ignore": ("regexes_to_ignore",
                            lambda pattern: _filter("multi_choice_regex", "regexes_to_ignore", [",", pattern])),
    "exact_match_ignore": ("regexes_to_ignore", lambda pattern: {"metric_list": [
        {"metric": "exact_match", "regexes_to_ignore": [pattern]}]}),
}
# exponential in Python's re: 1-2 s on a run of 24 a's (or spaces) and one more character, twice that per character
CATASTROPHIC = {"alternation": r"(a|a)+$", "nested": r"(a+)+$", "empty_repeated": r"(\s*)*$"}
REAL_STYLE = [r"#### (\-?[0-9\.\,]+)", r"The answer is (\-?[0-9\.\,]+).", r"(-?[$0-9.,]{2,})|(-?[0-9]+)",
              r"(?s).*#### ", r"^(.*?)\s*$"]  # gsm8k's filters and exact_match, MMLU generative's filter
TEMPLATES = {  # task templates rendered by lm-eval: in lmlab's sandbox unless --trust-task-code
    "ssti_doc_to_text": "{{ cycler.__init__.__globals__.os.system('touch ' ~ marker) }}",
    "ssti_subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "template_huge": "{{ 'x' * 10000000000 }}",
    "template_loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "template_wordwrap": "{{ ('x' * 2400000) | wordwrap(1) }}",
    "template_undefined": "{{ nothing.field }}",
    "template_syntax": "{{ question ",
    "template_division": "{{ 1 / 0 }}",
    "template_regex_replace": "{{ ('a' * 40 ~ 'b') | regex_replace('(a|a)+$', '') }}",
}


def task_folder(tmp_path, text: str):
    """tmp_path/tasks (the include path) with t.yaml = `text`, evil.py and the files includes name;
    tmp_path/other with base.yaml, which has a !function."""
    root, other = tmp_path / "tasks", tmp_path / "other"
    root.mkdir()
    other.mkdir()
    for folder in (root, other):
        (folder / "evil.py").write_text(EVIL)
    (other / "base.yaml").write_text(f"custom_dataset: {FUNCTION}\n")
    (root / "link.txt").symlink_to(other / "base.yaml")
    (root / "inner.txt").write_text(f"process_docs: {FUNCTION}\n")
    (root / "plain.txt").write_text("output_type: multiple_choice\n")
    (root / "chain.txt").write_text("include: chain2.txt\n")
    (root / "chain2.txt").write_text("include: inner.txt\n")
    (root / "cycle.txt").write_text(f"include: cycle2.txt\nprocess_docs: {FUNCTION}\n")
    (root / "cycle2.txt").write_text("include: cycle.txt\n")
    (root / "chain_plain.txt").write_text("include: plain.txt\n")
    (root / "loop1.txt").symlink_to(root / "loop2.txt")
    (root / "loop2.txt").symlink_to(root / "loop1.txt")
    (root / "t.yaml").write_text(text.replace("{other}", str(other)).replace("{root}", str(root)))
    return root


def markers(tmp_path) -> list:
    return sorted(tmp_path.rglob("MARKER"))


@pytest.mark.parametrize("name", CODE)
def test_task_code_is_refused_without_running(tmp_path, name):
    root = task_folder(tmp_path, CODE[name])
    outcome = probe("task_yaml", name, ["eval", "harness", "--model", "nowhere", "--tasks", "t", "--include-path",
                                        root], None, timeout=60)
    assert outcome.kind == "clean_error" and "t.yaml" in outcome.detail and "--trust-task-code" in outcome.detail
    assert markers(tmp_path) == []


@pytest.mark.parametrize("name", BOMBS)
def test_yaml_bombs_are_refused(tmp_path, name):
    root = task_folder(tmp_path, BOMBS[name])
    outcome = probe("task_yaml", name, ["eval", "harness", "--model", "nowhere", "--tasks", "t", "--include-path",
                                        root], None, timeout=60)
    assert outcome.kind == "clean_error" and "t.yaml" in outcome.detail
    assert markers(tmp_path) == []


@pytest.mark.parametrize("name", ["fifo", "dev_zero"])
def test_special_files_are_refused(tmp_path, name):
    """A task YAML that is a FIFO (lm-eval would wait on it forever) or a device (read forever)."""
    root = task_folder(tmp_path, "task: t\n")
    (root / "t.yaml").unlink()
    if name == "fifo":
        os.mkfifo(root / "t.yaml")
    else:
        (root / "t.yaml").symlink_to("/dev/zero")
    outcome = probe("task_yaml", name, ["eval", "harness", "--model", "nowhere", "--tasks", "t", "--include-path",
                                        root], None, timeout=60)
    assert "not a regular file" in outcome.detail


def test_folder_over_the_byte_total_is_refused(tmp_path, monkeypatch):
    """Each file is read once, however many include it, and all of them within MAX_TOTAL_BYTES (here 1,000)."""
    monkeypatch.setattr(task_files, "MAX_TOTAL_BYTES", 1_000)
    root = task_folder(tmp_path, "task: t\n")
    (root / "bulk.txt").write_text("x: " + "y" * 600 + "\n")
    assert task_code(root, set()) == {}
    for i in range(3):
        (root / f"t{i}.yaml").write_text(f"task: t{i}\ninclude: bulk.txt\n")
    assert task_code(root, set()) == {}  # bulk.txt counted once
    (root / "more.txt").write_text("x: " + "y" * 600 + "\n")
    (root / "t3.yaml").write_text("task: t3\ninclude: more.txt\n")
    outcome = probe("task_yaml", "byte_total", ["eval", "harness", "--model", "nowhere", "--tasks", "t",
                                                "--include-path", root], None, timeout=60)
    assert "1,000 bytes" in outcome.detail


@pytest.mark.parametrize("kind", CATASTROPHIC)
@pytest.mark.parametrize("place", REGEX_PLACES)
def test_regex_that_backtracks_without_bound_is_refused(tmp_path, place, kind):
    """Refused by the trust check, before lm-eval (or the model) runs, in one line naming the file,
    the key and the pattern; an included file is named itself."""
    key, settings = REGEX_PLACES[place]
    task = json.dumps({"task": "t", "include": "base.txt"})
    root = task_folder(tmp_path, task)
    (root / "base.txt").write_text(json.dumps(settings(CATASTROPHIC[kind])))
    outcome = probe("task_yaml", f"regex_{place}_{kind}", ["eval", "harness", "--model", "nowhere", "--tasks", "t",
                                                         "--include-path", root], None, timeout=10)
    assert outcome.kind == "clean_error" and "base.txt" in outcome.detail, outcome.detail
    assert all(part in outcome.detail for part in (key, repr(CATASTROPHIC[kind]), "--trust-task-code"))
    assert markers(tmp_path) == []


@pytest.mark.parametrize("pattern", REAL_STYLE)
@pytest.mark.parametrize("place", REGEX_PLACES)
def test_real_task_regexes_are_accepted(tmp_path, place, pattern):
    _, settings = REGEX_PLACES[place]
    assert task_code(task_folder(tmp_path, json.dumps({"task": "t", **settings(pattern)})), {"exact_match"}) == {}


@pytest.mark.parametrize("name", DATA)
def test_plain_data_is_not_code(tmp_path, name):
    assert task_code(task_folder(tmp_path, DATA[name]), {"acc", "exact_match"}) == {}


def test_utf16_file_is_read_as_lm_eval_reads_it(tmp_path):
    """A text search of the UTF-8 bytes misses `!function` in a UTF-16 file; the parser does not."""
    root = task_folder(tmp_path, "task: u\n")
    (root / "t.yaml").write_bytes(CODE["function_plain"].encode("utf-16"))
    assert "!function" in task_code(root, set())[root / "t.yaml"]


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory):
    """A tiny Llama directory and a two-question multiple-choice JSONL file."""
    root = tmp_path_factory.mktemp("harness")
    tokenizer = chat_tokenizer()
    model = save_model_dir(root / "llama", tiny_decoder("llama", tokenizer.vocab_size), tokenizer)
    data = root / "questions.jsonl"
    data.write_text("".join(json.dumps({"question": q, "choices": ["2", "5", "7"], "answer": a}) + "\n"
                            for q, a in (("What is 2 + 3?", 1), ("What is 1 + 1?", 0))))
    return model, data


def template_task(data, doc_to_text: str) -> str:
    return json.dumps({"task": "t", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
                       "output_type": "multiple_choice", "test_split": "test", "doc_to_text": doc_to_text,
                       "doc_to_choice": "{{choices}}", "doc_to_target": "answer",
                       "metric_list": [{"metric": "acc"}]})


def harness_command(model, root) -> list:
    return ["eval", "harness", "--model", model, "--tasks", "t", "--include-path", root, "--json"]


@pytest.mark.parametrize("name", TEMPLATES)
def test_task_templates_render_in_the_sandbox(model_and_data, tmp_path, monkeypatch, name):
    model, data = model_and_data
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    root = task_folder(tmp_path, template_task(data, TEMPLATES[name].replace("marker", repr(str(tmp_path / "MARKER")))))
    outcome = probe("task_yaml", name, harness_command(model, root), None, timeout=60)
    assert outcome.kind == "clean_error" and "task template" in outcome.detail, outcome.detail
    assert markers(tmp_path) == []


def test_regex_replace_growth_is_refused_before_allocating(model_and_data, tmp_path, monkeypatch):
    """An empty pattern matches at each of a million characters: 'y' * 1000 at each is a 1 GB result,
    refused from the count of matches before re.sub builds it."""
    model, data = model_and_data
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    root = task_folder(tmp_path, template_task(data, "{{ ('x' * 1000000) | regex_replace('', 'y' * 1000) | length }}"))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    outcome = probe("task_yaml", "template_regex_replace_growth", harness_command(model, root), None, timeout=60)
    assert outcome.kind == "clean_error" and "5,000,000 characters" in outcome.detail, outcome.detail
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 - before < 400


def test_plain_task_gives_the_trusted_numbers_without_trust(model_and_data, tmp_path, monkeypatch):
    model, data = model_and_data
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    root = task_folder(tmp_path, template_task(data, "{{ question | regex_replace('\\s+', ' ') | trim }}\n"
                                                     "{{ 'Answer' | upper }}:"))
    shutil.rmtree(tmp_path / "other")
    trusted = run_cli([*harness_command(model, root), "--trust-task-code"], 120)
    assert trusted.code == 0, trusted.err
    probe("task_yaml", "plain_task_same_as_trusted", harness_command(model, root), trusted.out, timeout=120)

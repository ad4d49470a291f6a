"""Which task YAMLs under --include-path make lm-eval run code, decided on the parsed YAML, not its text.

lm-eval loads a task YAML with a loader that imports Python for the tag `!function` (the module
beside the YAML, or any importable one), follows `include:` to other YAMLs (relative to the
resolved YAML's folder, or absolute), and hands a metric name it does not know to the HF `evaluate`
library, which runs that metric's script. A tag is only known after the parser resolves it: a
`%TAG` shorthand (`!x!ction`) or a `%xx` escape (`!fun%63tion`) spells `!function` without the
text. So each file is composed (parsed into nodes, nothing built) by the parser lm-eval uses, and
a file is data only when:

- every node's tag is one of YAML's own (what the safe loader builds: str, int, map, …); any other
  tag is code or unknown;
- each include resolves (symlinks too) to a file inside the include path that is data by these rules;
- each metric it names is one of lm-eval's own (`metrics`), and none asks for `hf_evaluate`.

The regexes a task hands Python's `re` run on model output and documents with no time limit, so one
that backtracks exponentially (`(a|a)+$`: hours on 40 characters) stalls the run: every `regex_pattern`
(the `regex`, `regex_pos` and `multi_choice_regex` filters) and `regexes_to_ignore` (those filters'
and the `exact_match` metric's) must be in `regex_checks`' safe class, or the file is refused.

Parsing is bounded: MAX_TASK_BYTES per file and MAX_TOTAL_BYTES in all (each file is read once),
MAX_NESTING levels of lists and mappings (checked on the parser's events before any node is built:
libyaml's composer recurses in C and crashes on deep nesting), MAX_NODES nodes per file counted
with aliases expanded (a "billion laughs" is refused, not expanded), includes MAX_INCLUDE_DEPTH
deep. The task templates (doc_to_text, …) are the other way a task runs code:
`harness.sandboxed_templates` renders them in lmlab's sandbox.
"""

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lmlab.errors import LmlabError
from lmlab.tokenizers.regex_checks import UnsafeRegex, check_regex

MAX_TASK_FILES = 10_000  # task YAMLs read under --include-path
MAX_TASK_BYTES = 1_000_000  # one task YAML (lm-eval's own are a few kB)
MAX_TOTAL_BYTES = 100_000_000  # all task YAMLs and what they include, each read once
MAX_NODES = 100_000  # YAML nodes in one file, each alias counted as the nodes it stands for
MAX_NESTING = 64  # lists and mappings inside one another (lm-eval's own tasks nest about 5 deep)
MAX_INCLUDE_DEPTH = 16  # a YAML including one including one …
YAML_TAGS = frozenset({*(tag for tag in yaml.SafeLoader.yaml_constructors if tag), "tag:yaml.org,2002:merge"})
_LOADER = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader  # lm-eval's parser
_FIX = "fix it or move it out of --include-path"
PATTERN_KEYS = ("regex_pattern", "regexes_to_ignore")  # lm-eval's filter and metric options that take regexes


def task_code(include_path: str | Path, metrics: Collection[str]) -> dict[Path, str]:
    """Each task YAML under `include_path` that lm-eval would run code for -> what in it does (a
    phrase to follow the path); `metrics` are the metric names lm-eval has without code."""
    files = sorted(p for p in Path(include_path).rglob("*")
                   if p.suffix in (".yaml", ".yml") and p.exists() and not p.is_dir())  # a FIFO too: lm-eval opens it
    if len(files) > MAX_TASK_FILES:
        raise LmlabError(f"--include-path {include_path} holds {len(files):,} YAML files (at most "
                         f"{MAX_TASK_FILES:,}); point it at the folder of your tasks")
    scan = _Scan(Path(include_path).resolve(), metrics)
    found = {path: scan.code_in(path.resolve(), 0) for path in files}
    return {path: reason for path, reason in found.items() if reason}


@dataclass
class _Scan:
    """One check of a task folder: each file (top-level or included) is read once, MAX_TOTAL_BYTES in all."""

    root: Path
    metrics: Collection[str]
    checked: dict[Path, str | None] = field(default_factory=dict)  # None while a file is being checked: a cycle
    bytes_read: int = 0

    def code_in(self, path: Path, depth: int) -> str | None:
        """What in the YAML `path` (resolved), or in what it includes, makes lm-eval run code; None if nothing."""
        if path in self.checked:
            return self.checked[path]
        if depth > MAX_INCLUDE_DEPTH:
            return f"includes YAMLs more than {MAX_INCLUDE_DEPTH} deep, further than lmlab checks"
        self.checked[path] = None
        self.checked[path] = reason = self._code_in(path, depth)
        return reason

    def _code_in(self, path: Path, depth: int) -> str | None:
        self.bytes_read += path.stat().st_size
        if self.bytes_read > MAX_TOTAL_BYTES:
            raise LmlabError(f"the task YAMLs under --include-path {self.root} and their includes hold over "
                             f"{MAX_TOTAL_BYTES:,} bytes; point it at the folder of your tasks")
        data, reason = _read(path)
        reason = reason or _metric_code(data, self.metrics)
        if reason or not isinstance(data, dict):  # lm-eval reads only a mapping's includes
            return reason
        _check_patterns(data, path)
        includes = data.get("include")
        for include in includes if isinstance(includes, list) else [includes]:
            try:
                target = (path.parent / include).resolve()
            except (TypeError, ValueError, OSError, RuntimeError):  # not a path, a NUL, a symlink loop
                continue  # lm-eval cannot open it either, so it skips the task
            if not target.is_relative_to(self.root):
                return f"includes {include}, which is outside --include-path"
            inner = self.code_in(target, depth + 1) if target.exists() else None
            if inner:
                return f"includes {include}, which {inner}"
        return None


def _read(path: Path) -> tuple[object, str | None]:
    """(The data of the YAML file `path`, None) when every tag in it is YAML's own, else (None, why)."""
    if not path.is_file():  # a folder, a FIFO or a device: lm-eval would wait on it or read it forever
        raise LmlabError(f"task file {path} is not a regular file; {_FIX}")
    try:
        with path.open("rb") as f:
            source = f.read(MAX_TASK_BYTES + 1)
    except OSError as e:
        raise LmlabError(f"cannot read task file {path} ({e.strerror}); {_FIX}") from None
    if len(source) > MAX_TASK_BYTES:
        raise LmlabError(f"task file {path} is over {MAX_TASK_BYTES:,} bytes, more than a task YAML needs; {_FIX}")
    loader = _LOADER(source)
    try:
        _check_shape(source, path)
        node = loader.get_single_node()
        if node is None:
            return None, None
        odd = _foreign_tag(node, path)
        if odd is not None:
            return None, (f"has the YAML tag {odd.tag} at line {odd.start_mark.line + 1}, which is code or not "
                          "plain data (lm-eval imports Python for !function in any spelling)")
        return loader.construct_document(node), None  # only YAML's own tags: the safe loader builds plain data
    except yaml.YAMLError as e:
        problem = " ".join(str(e).split())
        raise LmlabError(f"task file {path} is not YAML lmlab can check ({problem[:200]}); {_FIX}") from None
    finally:
        loader.dispose()


def _check_shape(source: bytes, path: Path) -> None:
    """Refuse a YAML text of more than MAX_NODES nodes or MAX_NESTING levels, from its parser events
    (libyaml's parser keeps its own stack, so this never recurses)."""
    depth = count = 0
    for event in yaml.parse(source, Loader=_LOADER):
        count += 1
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        if depth > MAX_NESTING or count > 2 * MAX_NODES:  # a node is one event, a list or mapping two
            raise LmlabError(f"task file {path} nests more than {MAX_NESTING} levels or holds more than "
                             f"{MAX_NODES:,} YAML nodes, more than a task needs; {_FIX}")


def _foreign_tag(node: yaml.Node, path: Path) -> yaml.Node | None:
    """The first node under `node` whose tag is not YAML's own, or None. Aliases are walked as the
    nodes they stand for: at most MAX_NODES nodes, nested at most MAX_NESTING deep (lm-eval copies
    the data recursively)."""
    stack, count = [(node, 0)], 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES or depth > MAX_NESTING:
            raise LmlabError(f"task file {path} expands through its aliases to more than {MAX_NODES:,} YAML nodes "
                             f"or {MAX_NESTING} levels, more than a task needs; {_FIX}")
        if node.tag not in YAML_TAGS:
            return node
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, depth + 1) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend((item, depth + 1) for pair in node.value for item in pair)
    return None


def _mappings(data) -> Iterator[dict]:
    """Every mapping in `data`, itself included, at most MAX_NODES values visited: `data` was counted by
    `_foreign_tag`, aliases expanded, so this bounds a walk of a recursive alias too."""
    stack, count = [data], 0
    while stack and count <= MAX_NODES:
        value = stack.pop()
        count += 1
        if isinstance(value, dict):
            yield value
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):  # tuples: the pairs of !!omap and !!pairs
            stack.extend(value)


def _metric_code(data, metrics: Collection[str]) -> str | None:
    """A metric in `data` that lm-eval would load from the HF evaluate library (running its script):
    one it does not have, or any asked for with `hf_evaluate`."""
    for mapping in _mappings(data):
        name = mapping.get("metric")
        if isinstance(name, str) and (name not in metrics or mapping.get("hf_evaluate")):
            return f"names the metric {name!r}, which lm-eval would load and run as code from the HF evaluate library"
    return None


def _check_patterns(data: dict, path: Path) -> None:
    """Refuse, in one line naming the file, key and pattern, a regex in `data` (under `PATTERN_KEYS`) that
    could backtrack without bound."""
    for mapping in _mappings(data):
        for key in PATTERN_KEYS:
            for pattern in _patterns(mapping.get(key)):
                _check_pattern(pattern, key, path)


def _patterns(value) -> list:
    """What lm-eval compiles from a `PATTERN_KEYS` value: a string, or each string it iterates to (a list's
    items, a mapping's keys); anything else fails in lm-eval before it matches anything."""
    found = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple, dict)) else []
    return [pattern for pattern in found if isinstance(pattern, str)]


def _check_pattern(pattern: str, key: str, path: Path) -> None:
    """Refuse `pattern`, found under `key` in `path`, unless it is in `regex_checks`' safe class (read as Python's)."""
    try:
        check_regex(pattern, syntax="python")
    except UnsafeRegex as error:
        raise LmlabError(f"task file {path} has the {key} {pattern[:80]!r}, which could backtrack without bound: "
                         f"{error}; fix the task's YAML, or pass --trust-task-code if you trust the tasks under "
                         "--include-path") from None

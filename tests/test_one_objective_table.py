"""One objective table, enforced: an objective is chosen and used through its record in
`objectives/registry.py` (`choose_objective`, `build_objective`, the record's `batch`, `head`,
`whole_word`, `sentence_pairs`), never by its name. Every module of src/lmlab outside `objectives/` is
parsed, and the test fails on

    - a comparison with an objective's name (`record.name == "rtd"`, `objective in ("mlm", "span")`, a
      `case "rtd":`): a branch on one, where the record should say what differs;
    - an import of a function a record holds (`from lmlab.objectives.causal_lm import causal_lm`): a use
      of one objective that goes around the registry.

Code that still does so is listed in EXCEPTIONS (per file), each with the reason; a test fails on an
exception that is no longer needed, so the list only shrinks.
"""

import ast
import dataclasses
import importlib
from pathlib import Path

from lmlab.objectives.registry import REGISTRY, ObjectiveRecord

SRC = Path(__file__).resolve().parents[1] / "src" / "lmlab"
NAMES = set(REGISTRY)
# every function a record holds (its builder, batch transformation, whole-word masking, pair drawing), by identity
HELD = {id(value) for record in REGISTRY.values() for field in dataclasses.fields(ObjectiveRecord)
        if callable(value := getattr(record, field.name))}

# file (relative to src/lmlab) -> why it still goes around the registry
EXCEPTIONS: dict[str, str] = {}


def _objective_names(node: ast.AST) -> list[str]:
    """The objective names a comparison's side spells: a string, or strings in a tuple, list or set."""
    nodes = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [n.value for n in nodes if isinstance(n, ast.Constant) and n.value in NAMES]


def _held_import(node: ast.ImportFrom) -> list[str]:
    """The names `node` imports from an `lmlab.objectives` module that are functions a record holds."""
    if not (node.module or "").startswith("lmlab.objectives.") or node.module == "lmlab.objectives.registry":
        return []
    module = importlib.import_module(node.module)
    return [alias.name for alias in node.names if id(getattr(module, alias.name, None)) in HELD]


def findings(source: str) -> list[str]:
    """'line: what' for each branch on an objective's name, or import of a record's function, in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        what = None
        if isinstance(node, ast.Compare):
            named = [name for side in [node.left, *node.comparators] for name in _objective_names(side)]
            what = f"a branch on the objective {named}" if named else None
        elif isinstance(node, ast.MatchValue) and _objective_names(node.value):
            what = f"a case of the objective {_objective_names(node.value)}"
        elif isinstance(node, ast.ImportFrom) and _held_import(node):
            what = f"an import of {_held_import(node)} (go through objectives.registry)"
        if what:
            found.append(f"{node.lineno}: {what}")
    return found


def sources() -> dict[str, str]:
    """Every module of src/lmlab outside objectives/, by its path relative to src/lmlab."""
    return {str(path.relative_to(SRC)): path.read_text(encoding="utf-8") for path in sorted(SRC.rglob("*.py"))
            if path.relative_to(SRC).parts[0] != "objectives"}


def test_no_module_branches_on_an_objective_s_name_or_imports_an_objective_s_function():
    found = {name: findings(source) for name, source in sources().items() if name not in EXCEPTIONS}
    found = {name: lines for name, lines in found.items() if lines}
    assert not found, ("ask the objective's record (objectives/registry.py) instead:\n"
                       + "\n".join(f"{name}:{line}" for name, lines in found.items() for line in lines))


def test_every_exception_is_still_needed():
    code = sources()
    stale = [name for name in EXCEPTIONS if name not in code or not findings(code[name])]
    assert not stale, f"no longer needed, remove from EXCEPTIONS: {stale}"


def test_the_check_finds_a_branch_a_case_and_an_import():
    source = '''
from lmlab.objectives.causal_lm import causal_lm
from lmlab.objectives.whole_word import whole_word_objective
from lmlab.objectives.registry import REGISTRY, choose_objective
from lmlab.objectives.sft import sft_batch

def pick(record, masking):
    if record.name == "rtd":
        pass
    if record.name in ("span", "unrelated") or masking == "dynamic":
        pass
    match record.name:
        case "mlm":
            pass
'''
    assert findings(source) == [
        "2: an import of ['causal_lm'] (go through objectives.registry)",
        "3: an import of ['whole_word_objective'] (go through objectives.registry)",
        "8: a branch on the objective ['rtd']",
        "10: a branch on the objective ['span']",
        "13: a case of the objective ['mlm']",
    ]

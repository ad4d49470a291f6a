"""The dependency direction of docs/development.md ("Layout of src/lmlab/"), enforced: every `lmlab` import in src/lmlab is parsed
and an import a package may not make fails the test, unless it is a listed exception with its reason.

    cli -> experiments -> recipes -> training -> (eval, inspect, inference) -> generation -> (losses, objectives)
        -> models -> heads -> modules, with data -> tokenizers -> io as leaves that models may read
        through (one way: io imports no tokenizer, tokenizers no corpus), figures as a leaf that training,
        eval, inspect and everything above them draw with, config above the foundations (errors,
        config_checks, progress) that anything may use.

Inside a package anything goes, except that one recipe may not import another: a recipe is wiring,
and what two recipes share belongs to the layer below them.
"""

import ast
from collections import Counter
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lmlab"

FOUNDATIONS = {"errors", "config_checks", "progress", "targets", "lazy"}
LEAVES = {"io", "tokenizers", "data"}  # data -> tokenizers -> io, never back
BELOW_MODELS = FOUNDATIONS | {"config"} | LEAVES | {"modules", "heads"}
# package -> the packages it may import besides itself
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "config_checks": {"errors"},
    "progress": set(),
    "targets": set(),
    "lazy": set(),
    "config": FOUNDATIONS,
    "io": FOUNDATIONS | {"config"},  # formats: files in, tensors and dicts out; no model, no tokenizer
    "tokenizers": FOUNDATIONS | {"config", "io"},
    "data": FOUNDATIONS | {"config"} | LEAVES,
    "figures": FOUNDATIONS | {"io"},  # PNG figures drawn with numpy: io's atomic writes and nothing else
    "modules": FOUNDATIONS,  # building blocks know nothing of files or configs
    "heads": FOUNDATIONS | {"modules"},  # a head takes sizes, never an encoder class
    "models": BELOW_MODELS,
    "objectives": FOUNDATIONS | {"config"} | LEAVES | {"modules"},
    "losses": FOUNDATIONS | {"modules", "objectives"},  # a loss reads the targets an objective makes
    "generation": BELOW_MODELS | {"models", "objectives"},
    "eval": BELOW_MODELS | {"models", "objectives", "losses", "generation", "figures"},
    "inspect": BELOW_MODELS | {"models", "generation", "figures"},
    "inference": BELOW_MODELS | {"models", "generation"},
    "rag": BELOW_MODELS | {"models", "generation", "eval", "inference", "figures"},  # retrieval: an index, a prompt
    "training": BELOW_MODELS | {"models", "objectives", "losses", "generation", "eval", "inspect", "figures"},
    "recipes": BELOW_MODELS | {"models", "objectives", "losses", "generation", "eval", "inspect", "inference",
                               "figures", "training", "recipes"},
    "experiments": set(),  # filled below: an experiment runs recipes and compares them
    "api": set(),  # the front door and the CLI sit on top: they may import everything
    "cli": set(),
}
ALLOWED["experiments"] = set(ALLOWED) - {"experiments", "api", "cli"}
ALLOWED["api"] = ALLOWED["cli"] = set(ALLOWED) - {"cli"}

# Imports against the direction, if one must ever be allowed: (importing module, imported package) -> why.
# None is: the list may only stay empty or shrink (a test fails on an exception no longer needed).
EXCEPTIONS: dict[tuple[str, str], str] = {}


def package(module: str) -> str:
    """lmlab.models.bert.model -> models; lmlab.errors -> errors."""
    return module.split(".")[1]


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")


def imports(path: Path) -> list[str]:
    """The lmlab modules (or names: `from lmlab.x import y` gives lmlab.x.y) that `path` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "lmlab":
            found += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "lmlab"]
    return found


def against_direction() -> list[tuple[str, str]]:
    """Every (importing module, imported name) whose package may not import the other's."""
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        importer = module_name(path)
        if importer == "lmlab":
            continue  # the front door re-exports from every layer
        source = package(importer)
        for target in imports(path):
            if target.count(".") < 1 or target == "lmlab.__version__":
                continue
            destination = package(target)
            if destination == source and source != "recipes":
                continue
            if destination == source:  # recipes: one recipe module importing another
                if importer.split(".")[2] != target.split(".")[2]:
                    wrong.append((importer, target))
                continue
            if destination not in ALLOWED[source]:
                wrong.append((importer, target))
    return wrong


def test_every_package_has_a_place_in_the_direction():
    packages = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
                if (p.is_file() and p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert packages <= set(ALLOWED), f"packages without a layer: {sorted(packages - set(ALLOWED))}"


def test_no_import_goes_against_the_direction():
    wrong = against_direction()
    new = [(a, b) for a, b in wrong if (a, package(b)) not in EXCEPTIONS]
    by_pair = Counter(f"{package(a)} -> {package(b)}" for a, b in new)
    assert not new, (f"{len(new)} imports against the direction ({dict(by_pair)}):\n"
                     + "\n".join(f"  {a} imports {b}" for a, b in new))


def test_no_two_packages_may_import_each_other():
    """The table is a direction: where a package may import another, the other may not import it back (io and
    tokenizers once imported each other; now data -> tokenizers -> io)."""
    both_ways = sorted((a, b) for a in ALLOWED for b in ALLOWED[a] if a < b and a in ALLOWED.get(b, set()))
    assert not both_ways, f"packages allowed to import each other: {both_ways}"


def test_exceptions_are_still_needed():
    gone = set(EXCEPTIONS) - {(a, package(b)) for a, b in against_direction()}
    assert not gone, f"these exceptions no longer happen; delete them from EXCEPTIONS: {sorted(gone)}"


def private_imports(root: Path) -> list[str]:
    """`importer imports module._name` for every leading-underscore name that a file under `root` imports."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "lmlab":
                found += [f"{path.relative_to(root.parent)} imports {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_private_name_is_imported_from_another_module():
    """A leading underscore keeps a name inside its module: what another module needs is public (the figure
    code was once reached through 17 private names of `eval/plot.py`; `lmlab.figures` now lists its API)."""
    wrong = private_imports(SRC) + private_imports(SRC.parents[1] / "benchmarks")
    assert not wrong, "\n".join(wrong)

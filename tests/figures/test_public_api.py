"""The figures package's public API: what `lmlab.figures` lists is all that other packages import, each
name is described in its docstring, and importing it loads no torch (training draws loss.png with it)."""

import ast
import subprocess
import sys
from pathlib import Path

import lmlab.figures as figures

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_is_described_in_the_package_docstring():
    assert figures.__all__ and all(f"`{name}(" in figures.__doc__ for name in figures.__all__)


def test_other_packages_import_figures_only_through_the_public_api():
    wrong = []
    for path in sorted((ROOT / "src" / "lmlab").rglob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py")):
        if "figures" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lmlab.figures"):
                names = [alias.name for alias in node.names]
                if node.module != "lmlab.figures" or set(names) - set(figures.__all__):
                    wrong.append(f"{path.relative_to(ROOT)}: from {node.module} import {', '.join(names)}")
    assert not wrong, "\n".join(wrong)


def test_importing_figures_loads_no_torch():
    code = "import sys, lmlab.figures; print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"

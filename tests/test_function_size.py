"""No function or method in src/lmlab over 80 lines (from its `def` to its last line, docstring
included): a longer one hides pieces another function would reuse, and reads as more than one idea.
Every function is parsed, so the rule holds for the class, not for the examples that broke it once
(`dpo`, `ppo`, `create_app`)."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lmlab"
MAX_LINES = 80


def long_functions(root: Path = SRC, limit: int = MAX_LINES) -> list[str]:
    """`file:line name (N lines)` of each function or method under `root` longer than `limit` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_src_is_over_80_lines():
    offenders = long_functions()
    assert not offenders, "split these into plain functions of at most 80 lines:\n" + "\n".join(offenders)


def test_the_size_check_finds_a_long_function_and_a_long_method(tmp_path):
    body = [f"x{i} = {i}" for i in range(80)]  # a def line and 80 more: 81 lines
    source = ["def short():", "    return 1", "", "def f():", *("    " + line for line in body), "",
              "class C:", "    async def g(self):", *("        " + line for line in body)]
    (tmp_path / "long.py").write_text("\n".join(source) + "\n")
    assert long_functions(tmp_path) == [f"{tmp_path.name}/long.py:4 f (81 lines)",
                                        f"{tmp_path.name}/long.py:87 g (81 lines)"]

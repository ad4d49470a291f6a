"""ruff over the source, the tests and the benchmarks, with the rule set in pyproject.toml (pyflakes, import
order, bugbear): an unused import, a name used before it is bound, a closure that reads a loop variable late
or a mutable default argument fails the test run, not a review."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed; it comes with the test extra: pip install -e '.[test]'")
    done = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "src", "tests", "benchmarks"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

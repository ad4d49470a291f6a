"""The default `pytest` run stays under 10 minutes on a 2-core VM: it splits over two pytest-xdist workers
that each run whole test files, and a command a test runs in a child process finds the C++ kernels built."""

import os
import shlex
from pathlib import Path

import tomllib

from real_models import models_root

PYPROJECT = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())


def test_the_default_run_uses_two_workers_over_whole_files():
    addopts = shlex.split(PYPROJECT["tool"]["pytest"]["ini_options"]["addopts"])
    assert addopts[addopts.index("-n") + 1] == "2" and addopts[addopts.index("--dist") + 1] == "loadfile"
    assert any(need.startswith("pytest-xdist") for need in PYPROJECT["project"]["optional-dependencies"]["test"])


def test_each_tests_cache_shares_the_built_kernels():
    kernels = Path(os.environ["LMLAB_CACHE"]) / "kernels"
    assert kernels.is_symlink() and kernels.resolve() == (Path(models_root()) / "kernels").resolve()

"""The real zoo models the slow tests need (SmolLM2-135M GGUF, all-MiniLM-L6-v2), downloaded once into a
persistent cache (`LMLAB_TEST_MODELS`, else ~/.cache/lmlab); a test that cannot get one is skipped."""

import os
from pathlib import Path

import pytest

from lmlab.errors import LmlabError
from lmlab.io import zoo


def models_root() -> str:
    """The persistent lmlab cache the slow tests download real models into."""
    return os.environ.get("LMLAB_TEST_MODELS") or str(Path.home() / ".cache" / "lmlab")


def real_model(name: str) -> Path:
    """The real zoo model `name`, downloaded once into `models_root()`; skips the test if impossible."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LMLAB_CACHE", models_root())
        try:
            return zoo.download(name)
        except LmlabError as e:
            pytest.skip(f"cannot download {name}: {e}")

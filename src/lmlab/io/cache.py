"""Where lmlab keeps things it can rebuild: tokenized corpora, downloaded weights."""

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """The lmlab cache (``$LMLAB_CACHE``, else ``~/.cache/lmlab``), joined with `parts` and created."""
    root = Path(os.environ.get("LMLAB_CACHE") or Path.home() / ".cache" / "lmlab")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path

"""The docs site builds with `mkdocs build --strict`: every page in the nav, every link and image resolves, the
command-line reference is written from the parsers and the API reference from the docstrings."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not (ROOT / "mkdocs.yml").is_file(), reason="needs the repository checkout")
def test_the_site_builds_strictly_with_the_generated_references(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    cli = (tmp_path / "cli" / "index.html").read_text()
    assert "lmlab eval perplexity" in cli and "--integration-steps" in cli and "<!-- lmlab:" not in cli
    assert "--max-steps" in (tmp_path / "flags" / "index.html").read_text()
    assert "estimate_memory" in (tmp_path / "api-reference" / "index.html").read_text()

"""The docs site builds with `mkdocs build --strict`: every page in the nav, every link and image resolves, the
command-line reference is written from the parsers and the API reference from the docstrings."""

import re
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


def test_no_page_links_to_itself():
    """A page read on the site is already the page: "everything is in [docs/serving.md](serving.md)" on
    serving.md itself sends the reader nowhere (a README sentence carried over). Links to a section of
    the same page (`#anchor`) are fine."""
    link = re.compile(r"\]\(\.?/?([^)#\s]+\.md)(#[^)]*)?\)")
    selves = [f"{page.name}: {target}" for page in (ROOT / "docs").rglob("*.md")
              for target, _ in link.findall(page.read_text(encoding="utf-8"))
              if (page.parent / target).resolve() == page.resolve()]
    assert not selves, selves

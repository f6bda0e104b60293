"""The documentation builds: `mkdocs build --strict` (what `make docs` runs) fails on a broken
link or anchor between pages and on a page left out of the navigation, and the links of
README.md and CONTRIBUTING.md, which live outside the site, point at files and headings
that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_LINES_AT_MOST = 250  # the first screen: the promise, two commands, the concepts, the layout
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "operations" / "configuration" / "index.html").exists()


def _slug(heading: str) -> str:
    """The anchor the site gives a heading (Python-Markdown's toc slugify, with `-`)."""
    text = unicodedata.normalize("NFKD", re.sub(r"[`*]", "", heading)).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(), flags=re.MULTILINE)
    return {_slug(h) for h in headings}


@pytest.mark.parametrize("document", ["README.md", "CONTRIBUTING.md"])
def test_every_relative_link_of_a_top_level_document_resolves(document: str) -> None:
    text = (ROOT / document).read_text()
    broken = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path, _, anchor = target.partition("#")
        resolved = ROOT / path
        if not resolved.exists() or (anchor and anchor not in _anchors(resolved)):
            broken.append(target)
    assert broken == []


def test_the_readme_stays_a_first_screen() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_LINES_AT_MOST, "move the detail into docs/"

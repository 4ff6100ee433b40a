"""The README and docs/ name only what exists: every `make` target in a Makefile rule, every local link
a file, every #anchor a heading of the page it points into (GitHub's anchor rule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]+\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = [line.lstrip("#").strip() for line in page.read_text().splitlines() if line.startswith("#")]
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-zA-Z0-9._-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))


def test_the_readme_starts_small() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_make_target_a_page_names_exists(page: Path) -> None:
    named = set(re.findall(r"`make ([a-z][a-z0-9.-]*)", page.read_text()))
    assert named <= make_targets(), f"{page.name} names missing targets: {sorted(named - make_targets())}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_local_link_and_anchor_exists(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"

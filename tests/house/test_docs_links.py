"""Links between the docs, and the code's citations of docs/design.md, lead somewhere (no
database needed): every relative Markdown link names a file of the repository and, with a
``#fragment``, a heading of that file (GitHub's anchors); every ``docs/<page>.md#anchor`` in
the package, the tests, the benchmark and the docs names a heading of that page; nothing
cites a design document outside the repository."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        ROOT / "tests" / "README.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)
SOURCES = sorted(
    path
    for folder in ("schemaless_store", "tests", "bench", "project", "scripts")
    for path in (ROOT / folder).rglob("*")
    if path.suffix in {".py", ".sh", ".html"} and path.is_file()
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CITATION = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: Counter[str] = Counter()
    found = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = re.match(r"#{1,6} (.+)", line)
        if heading and not in_code:
            base = slug(heading.group(1))
            found.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    return frozenset(found)


def test_the_slugs_are_githubs():
    assert slug("I1 no false positives") == "i1-no-false-positives"
    assert slug('Full run of 2026-11-24 (issue 20\'s "one full run")') == (
        "full-run-of-2026-11-24-issue-20s-one-full-run"
    )
    assert slug("`manage.py runcleaner`") == "managepy-runcleaner"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_a_file_and_a_heading(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path_part, _, fragment = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no such heading in {linked.name}")
    assert broken == []


def test_citations_of_a_page_name_one_of_its_headings():
    broken = []
    for path in [*SOURCES, *PAGES]:
        for page, anchor in CITATION.findall(path.read_text()):
            cited = ROOT / "docs" / page
            if not cited.exists() or anchor not in anchors(cited):
                broken.append(f"{path.relative_to(ROOT)}: docs/{page}#{anchor}")
    assert broken == []


def test_the_design_is_cited_from_the_repository_only():
    """The design is docs/design.md: no upper-case "design section N", no design file
    elsewhere (the pattern is spelled so that a grep for the word finds no line here)."""
    outside = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in [*SOURCES, *PAGES]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\b[D]ESIGN\b", line)
    ]
    assert outside == []

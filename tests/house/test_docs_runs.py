"""Every benchmark run a document cites is in ``bench/results/`` (committed with ``git add -f``,
the folder being ignored by git), or named in docs/performance.md's list of runs that were
cited without being committed: the list may shrink, never grow unseen."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = re.compile(r"\b[a-z][a-z0-9_-]*-20[0-9]{6}T[0-9]{4,6}Z[A-Za-z0-9_-]*")


def _cited() -> dict[str, set[str]]:
    cited: dict[str, set[str]] = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        if doc.name == "performance.md":  # the list of lost runs cites nothing
            text = text.replace(_lost_section(), "")
        for name in RUN.findall(text):
            cited.setdefault(name.rstrip("-_"), set()).add(doc.name)
    return cited


def _lost_section() -> str:
    text = (ROOT / "docs" / "performance.md").read_text()
    return text.split("## Runs not in the repository", 1)[1].split("\n## ", 1)[0]


def _listed_as_lost() -> set[str]:
    return set(re.findall(r"^- `([^`]+)`$", _lost_section(), re.MULTILINE))


@cache
def _committed() -> tuple[str, ...]:
    """The files of ``bench/results/`` git holds (the folder is ignored: a run only on disk
    was not committed); outside a checkout, what is on disk."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "bench/results"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = [str(p.relative_to(ROOT)) for p in (ROOT / "bench" / "results").rglob("*")]
    return tuple(Path(path).name for path in listed)


def _present(name: str) -> bool:
    return any(file.startswith(name) for file in _committed())


def test_every_cited_run_is_committed_or_listed_as_lost():
    lost = _listed_as_lost()
    missing = {
        name: sorted(docs)
        for name, docs in _cited().items()
        if not _present(name) and name not in lost
    }
    assert missing == {}, "cited runs neither in bench/results/ nor listed as lost"


def test_a_run_listed_as_lost_is_really_missing_and_still_cited():
    cited = _cited()
    stale = sorted(name for name in _listed_as_lost() if _present(name) or name not in cited)
    assert stale == [], "listed as lost but present, or no longer cited: drop from the list"

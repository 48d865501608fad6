"""The release (issue 46): one version, read from ``schemaless_store.__version__``; the
CHANGELOG grouped by release with that version's section first after "Unreleased", saying how
to upgrade; docs/upgrading.md has the steps to it."""

from __future__ import annotations

import re

import schemaless_store
from tests.support.package import ROOT, pyproject

VERSION = schemaless_store.__version__


def test_the_version_is_the_packages_own_and_a_release():
    project = pyproject()
    assert "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "schemaless_store.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), f"{VERSION} is not a release version"


def test_the_changelog_is_grouped_by_release():
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\S+)", text, re.M)
    assert releases[0] == "Unreleased" and releases[1] == VERSION, releases[:3]
    section = text.split(f"\n## {VERSION}", 1)[1].split("\n## ", 1)[0]
    headings = re.findall(r"^### (.+)$", section, re.M)
    assert headings[:3] == ["What changed for users", f"Upgrading to {VERSION}", "Fixed"]
    anchor = "#to-" + VERSION.replace(".", "")  # the heading "To 0.1.0" of docs/upgrading.md
    assert "upgrading.md" + anchor in section
    fixed = section.split("### Fixed", 1)[1].split("\n### ", 1)[0]
    assert len(re.findall(r"^- ", fixed, re.M)) >= 10, "each fix named, one a line"


def test_upgrading_md_says_how_to_reach_the_release():
    text = (ROOT / "docs" / "upgrading.md").read_text()
    assert f"\n## To {VERSION}\n" in text

"""The browser tests' Chromium (Debian's, driven by Playwright), where their screenshots go,
and a logged-in admin page.

Chromium comes from Debian (``scripts/browser-deps.sh``), never from ``playwright install``: the
machines cannot download browser builds. Off CI, a machine without it skips the browser tests;
in CI they fail, so they cannot silently stop running.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def require_browser() -> None:
    """Skip (off CI) or fail (in CI) when Playwright or Chromium is missing."""
    problem = ""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problem = "the playwright package is not installed (requirements-dev.txt)"
    if not problem and not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        problem = f"{CHROMIUM} is missing: run scripts/browser-deps.sh"
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test must run in CI: {problem}")
        pytest.skip(problem)


@contextmanager
def admin_page(live_server: Any, width: int) -> Iterator[Any]:
    """A logged-in admin page in a window ``width`` px wide."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(f"{live_server.url}/admin/login/?next=/admin/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "secret-pw")
            page.click("input[type=submit]")
            page.wait_for_selector("#site-name")
            yield page
        finally:
            browser.close()


def seed_demo() -> None:
    """The demo's seed: 6 users and 30 entries."""
    call_command("seed", "--users", "6", "--entries", "30", "--seed", "7", verbosity=0)

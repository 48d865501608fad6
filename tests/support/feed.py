"""What the demo feed's tests (tests/demo) share: a link several users post, signing up,
running the demo's scripts as a person would (from the repository's root, without this test
run's variables), and reading its pages (the entries shown, the pager's links and cursors)."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from django.core import signing
from django.test import Client

from schemaless_store.query import cursors

SHARED = "https://friendfeed.com/"
ROOT = Path(__file__).resolve().parents[2]

# Variables from this test run that would point the demo elsewhere than its embedded default.
FOREIGN = (
    "DJANGO_SETTINGS_MODULE",
    "DATABASE_URL",
    "SHARD_DATABASE_URLS",
    "FEED_LIVE_INDEXES",
    "SCHEMALESS_TEST_DATABASES",
    "DEMO_SEED_ARGS",
    "HOST",
)


def sign_up(client: Client, username: str, email: str | None = None, name: str = ""):
    return client.post(
        "/signup/",
        {"username": username, "email": email or f"{username}@example.com", "name": name},
    )


def entry_ids(html: str) -> list[str]:
    return re.findall(r'<article class="card entry" id="entry-([0-9a-f-]+)"', html)


def pager_href(html: str, which: str) -> str | None:
    """The ``href`` of the pager's link ``which`` (older, newer, newest), unescaped."""
    found = re.search(rf'<a href="([^"]*)" id="{which}"', html)
    return unescape(found.group(1)) if found else None


def older_link(html: str) -> str | None:
    """The cursor the "Older" link leads to."""
    href = pager_href(html, "older")
    return parse_qs(urlsplit(href).query)["after"][0] if href else None


def unsigned(href: str) -> dict[str, list]:
    """A link's query with each signed cursor replaced by what it says (its signature carries
    the time it was made, so two renders a second apart differ as strings)."""
    query = parse_qs(urlsplit(href).query)
    for name in ("after", "back"):
        query[name] = [
            signing.loads(v, salt=cursors.CURSOR_SALT, serializer=cursors.CursorSerializer)
            for v in query.get(name, [])
        ]
    return query


def walk(client: Client, path: str) -> list[str]:
    """Entry ids on every page of ``path``, following the "Older" links."""
    return [i for page in walk_pages(client, path) for i in page]


def walk_pages(client: Client, path: str, which: str = "older", start: str = "") -> list[list[str]]:
    """The entry ids of each page, from ``path + start`` on, following the links ``which``."""
    pages: list[list[str]] = []
    href: str | None = start
    for _ in range(50):
        response = client.get(path + href if href.startswith("?") or not href else href)
        assert response.status_code == 200
        html = response.content.decode()
        pages.append(entry_ids(html))
        href = pager_href(html, which)
        if href is None:
            return pages
    raise AssertionError("pagination did not end")

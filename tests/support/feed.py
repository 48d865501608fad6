"""What the demo feed's tests (tests/demo) share: a link several users post, signing up, and
running the demo's scripts as a person would (from the repository's root, without this test
run's variables)."""

from __future__ import annotations

from pathlib import Path

from django.test import Client

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

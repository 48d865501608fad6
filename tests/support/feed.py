"""What the demo feed's tests (tests/demo) share: a link several users post, and signing up."""

from __future__ import annotations

from django.test import Client

SHARED = "https://friendfeed.com/"


def sign_up(client: Client, username: str, email: str | None = None, name: str = ""):
    return client.post(
        "/signup/",
        {"username": username, "email": email or f"{username}@example.com", "name": name},
    )

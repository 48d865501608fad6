"""The feed's small JSON API (project/feed/rest.py, the REST extra): entries by the store's
signed cursors, one user's through the Entry kind's index, one entry; read only."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from project.feed.models import Entry, User
from tests.support import STORE

pytestmark = [STORE, pytest.mark.usefixtures("feed_site")]


def test_entries_are_listed_paged_and_read_only():
    ada = User.objects.create(username="ada", email="ada@example.com")
    bob = User.objects.create(username="bob", email="bob@example.com")
    for n in range(3):
        Entry.objects.create(user=ada, title=f"ada {n}", link=f"https://example.com/a/{n}")
    Entry.objects.create(user=bob, title="bob's", link="https://example.com/b")
    api = APIClient()
    response = api.get("/api/entries/", {"size": 2})
    assert response.status_code == 200, response.content
    first = response.json()
    assert len(first["results"]) == 2 and first["next"]
    rest = api.get(first["next"]).json()
    titles = [e["title"] for e in first["results"] + rest["results"]]
    assert sorted(titles) == ["ada 0", "ada 1", "ada 2", "bob's"]
    mine = api.get("/api/entries/", {"user": str(ada.id)}).json()["results"]
    assert sorted(e["title"] for e in mine) == ["ada 0", "ada 1", "ada 2"]
    (entry,) = Entry.objects.filter(user=bob).order_by("published")
    assert api.get(f"/api/entries/{entry.id}/").json()["link"] == "https://example.com/b"
    assert api.get(f"/api/entries/{ada.id}/").status_code == 404  # a user, not an entry
    assert api.post("/api/entries/", {"title": "x"}, format="json").status_code == 405
    assert api.delete(f"/api/entries/{entry.id}/").status_code == 405
    assert Entry.objects.all().count() == 4

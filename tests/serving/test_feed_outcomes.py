"""For clients that are not browsers (the load test): "act as" and "post" say what they did in
``X-Feed-Outcome`` (both redirect either way), and a post names its new entry in
``X-Feed-Entry`` (issue 37)."""

from __future__ import annotations

import uuid

from project.feed.models import Entry, User
from project.feed.views import ENTRY_HEADER, OUTCOME_HEADER
from tests.support import STORE

pytestmark = [STORE]


def test_act_as_and_post_say_what_they_did_and_a_post_its_entry(feed_site, client):
    User.objects.create(username="poster", email="p@example.com")
    refused = client.post("/act-as/", {"username": "nobody"})
    assert (refused.status_code, refused[OUTCOME_HEADER]) == (302, "no-such-user")
    before = client.post("/post/", {"title": "Too soon", "link": "https://example.com/s"})
    assert (before.status_code, before[OUTCOME_HEADER]) == (302, "not-acting")
    assert ENTRY_HEADER not in before
    acting = client.post("/act-as/", {"username": "poster"})
    assert (acting.status_code, acting[OUTCOME_HEADER]) == (302, "acting")
    posted = client.post("/post/", {"title": "Hello", "link": "https://example.com/h"})
    assert (posted.status_code, posted[OUTCOME_HEADER]) == (302, "posted")
    entry = Entry.objects.get(id=uuid.UUID(posted[ENTRY_HEADER]))
    assert entry["title"] == "Hello"
    assert client.get(f"/e/{entry.id}/").status_code == 200

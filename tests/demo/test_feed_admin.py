"""The demo on real types in its admin and API (issue 44, item 7): an entry's time reads as a
date, not a 17-digit number; its user is a link to the user and a raw-id widget; the list's
users are read in one batch; the API gives the time in ISO 8601 and the user's id, and filters
by a day."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from rest_framework.test import APIClient

from project.feed.models import Entry, User
from tests.support import STORE

pytestmark = [STORE, pytest.mark.usefixtures("feed_site")]

WHEN = dt.datetime(2022, 5, 6, 14, 30, tzinfo=dt.UTC)


@pytest.fixture
def ada_entry() -> Entry:
    ada = User.objects.create(username="ada", email="ada@example.com", name="Ada")
    return Entry.objects.create(
        user=ada, title="Hello", link="https://example.com/", published=WHEN
    )


def test_the_entry_list_and_page_read_like_a_django_site(admin_client, ada_entry, monkeypatch):
    ada = ada_entry.user
    calls = []
    get_many = type(User.objects).get_many

    def counted(self, ids):
        calls.append(list(ids))
        return get_many(self, ids)

    monkeypatch.setattr(type(User.objects), "get_many", counted)
    listing = admin_client.get("/admin/feed/entry/").content.decode()
    assert "May 6, 2022, 2:30 p.m." in listing  # a date, not 1651847400000000
    assert str(int(WHEN.timestamp() * 1_000_000)) not in listing
    assert f'<a href="/admin/feed/user/{ada.id}/change/">ada</a>' in listing
    assert len(calls) == 1  # the page's users, in one batch
    assert 'href="?published__gte=' in listing  # the date filter
    page = admin_client.get(f"/admin/feed/entry/{ada_entry.id}/change/").content.decode()
    assert 'name="published_0" value="2022-05-06"' in page
    box = re.search(r'<input type="text" name="user"[^>]*>', page).group(0)
    assert f'value="{ada.id}"' in box and "vForeignKeyRawIdAdminField" in box
    assert f'href="/e/{ada_entry.id}/" class="viewsitelink"' in page
    users = admin_client.get("/admin/feed/user/", {"q": "ada"}).content.decode()
    assert f'<a href="/admin/feed/user/{ada.id}/change/">ada</a>' in users  # =username


def test_the_api_gives_iso_times_and_the_users_id(ada_entry):
    api = APIClient()
    (item,) = api.get("/api/entries/").json()["results"]
    assert item["published"] == "2022-05-06T14:30:00Z"
    assert item["user"] == str(ada_entry.user_id)
    assert [
        e["title"] for e in api.get("/api/entries/", {"published": "2022-05-06"}).json()["results"]
    ] == ["Hello"]
    assert api.get("/api/entries/", {"published": "2022-05-07"}).json()["results"] == []
    assert api.get("/api/entries/", {"user": str(ada_entry.user_id)}).json()["results"]

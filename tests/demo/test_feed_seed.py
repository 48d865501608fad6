"""``manage.py seed``: realistic feed data through ``bulk_put``, in the numbers asked for."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from io import StringIO

import factory.random
import pytest
from django.core.management import CommandError, call_command

from project.feed.factories import UserFactory
from project.feed.models import Comment, Entry, Like, User
from schemaless_store.models import Entity
from tests.support import STORE

pytestmark = STORE


def seed(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("seed", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def kinds() -> Counter:
    return Counter(e.get("kind") for e in Entity.objects.all())


def test_seed_writes_users_and_entries_with_their_likes_and_comments():
    out, err = seed("--users", "4", "--entries", "12", "--seed", "3")
    counted = kinds()
    assert counted["user"] == 4 and counted["entry"] == 12
    assert f"Seeded {sum(counted.values())} entities (4 users, 12 entries" in out
    assert f"{sum(counted.values())}/{sum(counted.values())}" in err  # the progress bar

    users = {u.id: u for u in User.objects.all()}
    assert len(users) == 4
    feed = list(Entry.objects.filter_index().order_by("-published"))
    assert len(feed) == 12  # every entry is found through the feed's indexes
    assert [e["published"] for e in feed] == sorted((e["published"] for e in feed), reverse=True)
    # Real types (issue 44): an aware datetime, and the author as a reference to a User.
    assert all(isinstance(e.published, dt.datetime) and e.published.tzinfo for e in feed)
    assert all(e.user.id == e.user_id and e.user_id in users for e in feed)
    likes = list(Like.objects.filter_index(entry_id__in=[e.id for e in feed]).order_by("created"))
    assert len(likes) == counted["like"]
    assert len({(like["entry_id"], like["user_id"]) for like in likes}) == len(likes)
    published = {e.id: e["published"] for e in feed}
    for item in likes + list(
        Comment.objects.filter_index(entry_id__in=published).order_by("created")
    ):
        assert item["user_id"] in users
        assert item["created"] >= published[item["entry_id"]]


def test_if_empty_seeds_only_a_store_without_feed_users():
    seed("--users", "2", "--entries", "3", "-v", "0")
    before = kinds()
    out, _ = seed("--if-empty")
    assert "nothing seeded (--if-empty)" in out
    assert kinds() == before
    seed("--users", "2", "--entries", "3", "-v", "0")  # without it, a second run adds more
    assert kinds()["user"] == 4 and kinds()["entry"] == 6


def test_entities_writes_exactly_that_many_quietly():
    out, err = seed("--entities", "157", "--batch-size", "40", "-v", "0")
    assert out == err == ""
    counted = kinds()
    assert sum(counted.values()) == 157
    assert counted["user"] == 3  # 157 // 50


def test_a_taken_username_is_renamed_not_fatal():
    factory.random.reseed_random(11)
    UserFactory.reset_sequence(force=True)
    taken = UserFactory()["username"]
    User.objects.create(username=taken, email="someone.else@example.com")

    UserFactory.reset_sequence(force=True)
    seed("--users", "3", "--entries", "0", "--seed", "11", "-v", "0")

    names = [u["username"] for u in User.objects.all()]
    assert len(names) == len(set(names)) == 4
    assert taken in names and any(n.startswith(f"{taken}_") for n in names)


def test_entries_need_users():
    with pytest.raises(CommandError, match="entries need authors"):
        seed("--users", "0", "--entries", "5")

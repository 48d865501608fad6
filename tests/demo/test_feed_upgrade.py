"""The feed's data migration to real types (project/feed/upgrade.py, issue 44 item 7):
entities stored with int microseconds and an entry's ``user_id`` read, after ``mapentities``,
as the kinds declare them now, and are found through the new indexes."""

from __future__ import annotations

import datetime as dt

from project.feed.models import Comment, Entry, User
from project.feed.upgrade import real_types
from schemaless_store.config import conf
from schemaless_store.mapping import map_entities
from schemaless_store.models import Entity
from tests.support import STORE
from tests.support.mapping import forget_runs
from tests.support.raw import raw_set_body

pytestmark = STORE

WHEN_US = 1_700_000_000_123_456
WHEN = dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC)


def old(**properties) -> Entity:
    """An entity as the feed stored it before issue 44: written bare, then its body set by
    hand (today's typed indexes would refuse the ints)."""
    entity = Entity.objects.create(kind=properties["kind"])
    raw_set_body(entity, conf.get().codec.encode({**properties}))
    return entity


def test_old_entities_are_brought_to_real_types():
    try:
        ada = old(kind="user", username="ada", email="ada@example.com", name="", joined=WHEN_US)
        entry = old(
            kind="entry",
            user_id=ada.id,
            title="Old",
            link="https://example.com/",
            published=WHEN_US,
        )
        comment = old(kind="comment", entry_id=entry.id, user_id=ada.id, body="hi", created=WHEN_US)
        assert Entry.objects.get(pk=entry.id).kind_errors()  # the old shape does not fit
        for kind in ("user", "entry", "comment", "like"):
            assert map_entities(real_types, kind=kind).ok
        for kind in ("user", "entry"):  # again: nothing left to change
            assert map_entities(real_types, kind=kind).changed == 0
    finally:
        forget_runs()
    upgraded = Entry.objects.get(pk=entry.id)
    assert upgraded.kind_errors() == {}
    assert upgraded.published == WHEN and upgraded.user == User.objects.get(pk=ada.id)
    assert "user_id" not in upgraded
    assert list(Entry.objects.filter(user=ada.id).order_by("-published")) == [upgraded]
    assert Comment.objects.get(pk=comment.id).created == WHEN
    assert User.objects.get(pk=ada.id).joined == WHEN

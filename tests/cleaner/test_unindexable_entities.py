"""Entities the cleaner cannot index (a corrupt body, a value a building index cannot hold,
a unique value claimed twice) are reported and skipped; the pass goes on."""

from __future__ import annotations

import logging

import pytest

from schemaless_store.cleaner import Cleaner
from schemaless_store.config import conf
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import IndexValueError
from schemaless_store.models import Entity
from schemaless_store.tables import lifecycle
from tests.support import STORE
from tests.support.cleaner import PUBLISHED, passes, state
from tests.support.invariants import assert_exact
from tests.support.raw import index_rows, raw_delete, raw_set_body

pytestmark = STORE


def test_corrupt_bodies_are_reported_and_skipped(published, posts):
    broken = posts[5]
    raw_set_body(broken, b"\x00not a body")

    summary = Cleaner(indexes=[PUBLISHED, "index_link"], once=True, batch_size=40).run()

    assert not summary.failed
    assert state(PUBLISHED) == "ready"
    assert summary.total("errors") >= 2  # at least the backfill and the repair saw it
    recorded = passes(index_name=PUBLISHED, kind="backfill", errors__gt=0)
    assert len(recorded) == 1
    assert broken.id.hex in recorded[0].message and "corrupt body" in recorded[0].message
    # Its rows in other indexes are left alone (we cannot know what it implies)...
    assert any(row[1] == broken.id.bytes for row in index_rows("index_link"))
    # ... and every other entity is indexed exactly.
    raw_delete("index_link", broken.id.bytes)
    broken.delete()
    assert_exact([published, registry.get("index_link")])


def test_a_write_does_not_fail_on_an_index_still_building(published, posts, caplog):
    """A value a ``building`` index cannot hold does not fail the write (that index serves no
    query yet): the write skips its row, the backfill reports the entity. Once the index is
    ready, the same write is refused as for any serving index."""
    with caplog.at_level(logging.WARNING, logger="schemaless_store.writes"):
        odd = Entity.objects.create(published="yesterday", link="https://example.com/odd")
    assert "index_cleaner_published is still building" in caplog.text
    assert Entity.objects.get(id=odd.id).body_properties()["published"] == "yesterday"
    assert not [row for row in index_rows(PUBLISHED) if odd.id.bytes in row]
    # The indexes that serve queries got their rows.
    assert [row for row in index_rows("index_link") if odd.id.bytes in row]

    summary = Cleaner(indexes=[PUBLISHED], once=True, batch_size=64).run()

    assert not summary.failed
    assert state(PUBLISHED) == "ready"
    recorded = passes(index_name=PUBLISHED, kind="backfill", errors__gt=0)
    assert len(recorded) == 1 and odd.id.hex in recorded[0].message
    lifecycle.forget_states()
    with pytest.raises(IndexValueError):
        Entity.objects.create(published="tomorrow")
    odd.delete()
    assert_exact([published])


def test_a_unique_conflict_is_reported_not_fatal():
    first = Entity.objects.create(username="bob")
    second = Entity.objects.create(username="alice")
    # Another way in (e.g. a restored backup): the second entity now claims "bob" too.
    raw_set_body(second, conf.get().codec.encode({"username": "bob"}))
    raw_delete("index_users_username", second.id.bytes)

    summary = Cleaner(indexes=["index_users_username"], once=True).run()

    assert not summary.failed
    assert summary.total("errors") == 1
    (repair,) = passes(index_name="index_users_username", kind="repair", errors=1)
    assert second.id.hex in repair.message
    assert [e.id for e in Entity.objects.filter_index(username="bob")] == [first.id]

"""A process that cannot read the stored shard map keeps routing by the copy it has
(docs/design.md#bucket-map), but that copy vouches for no read: a move may have finished since,
and the old owner's rows are gone. Each read is confirmed by the shard's own bucket table, so a
moved entity is found on its new owner or the read fails; it is never reported missing."""

from __future__ import annotations

import dataclasses
import time

import pytest
from django.conf import settings
from django.db import OperationalError
from django.test import override_settings

from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map
from tests.support import STORE, buckets
from tests.support.moving import source_and_target

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def metadata_unreachable() -> None:
    raise OperationalError(2003, "Can't connect to the metadata server (the test says so)")


def test_a_map_kept_while_the_metadata_database_is_down_never_reports_a_moved_entity_missing(
    monkeypatch,
):
    from schemaless_store.moves import plan
    from schemaless_store.moves.mover import Mover

    source, target = source_and_target()
    entity = Entity.objects.create(id=buckets.id_in_bucket(5), title="before", user_id=b"m" * 16)
    assert entity.shard == source
    before = bucket_map.refresh()  # the map this process had: no move under way
    assert not before.moving and before.owners[5] == source
    Mover(plan.start(plan.plan(target, list(range(300))))).run()
    entity = Entity.objects.get(id=entity.id)
    entity["title"] = "after"
    entity.save()
    assert entity.shard == target
    # The process goes back to its copy from before the move, due for a refresh, and the
    # metadata database stops answering: the refresh keeps that copy.
    raw = {**settings.SCHEMALESS, "MOVE_WAIT": 0.3}
    with override_settings(SCHEMALESS=raw):
        monkeypatch.setattr(bucket_map, "stored", lambda *args, **kwargs: metadata_unreachable())
        old = dataclasses.replace(before, fetched_at=time.monotonic() - 3600)
        monkeypatch.setattr(bucket_map, "_cached", old)
        kept = bucket_map.current()
        assert kept.version == before.version and kept.unverified
        with pytest.raises(bucket_map.StaleRead):
            Entity.objects.get(id=entity.id)  # not DoesNotExist: the source gave it away
        with pytest.raises(bucket_map.StaleRead):
            Entity.objects.get_many([entity.id])
    # The metadata database answers again: the read is served by the new owner.
    monkeypatch.undo()
    assert Entity.objects.get(id=entity.id)["title"] == "after"


def test_a_kept_map_still_serves_the_buckets_nobody_moved(monkeypatch):
    source, _target = source_and_target()
    entity = Entity.objects.create(id=buckets.id_in_bucket(5), title="here", user_id=b"k" * 16)
    assert entity.shard == source
    before = bucket_map.refresh()
    monkeypatch.setattr(bucket_map, "stored", lambda *args, **kwargs: metadata_unreachable())
    monkeypatch.setattr(
        bucket_map, "_cached", dataclasses.replace(before, fetched_at=time.monotonic() - 3600)
    )
    assert bucket_map.current().unverified
    assert Entity.objects.get(id=entity.id)["title"] == "here"
    assert list(Entity.objects.get_many([entity.id])) == [entity.id]

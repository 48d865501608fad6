"""The cleaner's sweep deletes a row it finds on the wrong shard by the map only where that
shard's own bucket table holds the row's bucket in no state, or as ``gone``
(cleaner/repairs.delete_on). The map may be older than a move's flip (``MAP_MAX_AGE``), and a
move's target holds the real rows while it copies them in: deleted there, a committed entity
went missing from its index (I2) once the move ended. Found by a hostile review (2026-11-28)."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest
from django.db import connections

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.config.metadata import BucketMove
from schemaless_store.models import Entity
from schemaless_store.moves import plan
from schemaless_store.moves.mover import Mover
from schemaless_store.tables import index_rows
from schemaless_store.topology import bucket_map
from tests.support import STORE, buckets
from tests.support.moving import MOVED_SET, source_and_target

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def _link_in_moved_buckets() -> str:
    index = registry.get("index_link")
    for number in range(10_000):
        link = f"https://example.com/moved/{number}"
        (values,) = index.rows_for({"link": link})
        if bucket_map.bucket_for(index.routing_key(values[index.shard_position])) in MOVED_SET:
            return link
    raise AssertionError("no link in the moved buckets")


def _rows_on(alias: str) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM index_link")
        return int(cursor.fetchone()[0])


def _sweep(alias: str) -> None:
    cleaner = Cleaner(indexes=["index_link"], once=True, batch_size=50)
    cleaner.run_passes(registry.get("index_link"), alias, ["sweep"])


def _move_ends_with_the_entity_found(moving: Mover, link: str, key: object) -> None:
    moving.run()
    assert BucketMove.objects.get().phase == "done", BucketMove.objects.get().message
    bucket_map.forget()
    assert [e.id for e in Entity.objects.filter_index(link=link)] == [key]


def test_a_sweep_of_the_target_during_the_copy_keeps_the_rows_copied_in():
    source, target = source_and_target()
    staying = buckets.id_in_bucket(1000)  # the entity stays on the source; its row moves
    assert bucket_map.alias_for(staying.bytes) == source
    link = _link_in_moved_buckets()
    Entity.objects.create(id=staying, link=link)
    moving = Mover(plan.start(plan.plan(target, sorted(MOVED_SET))))
    moving.copy()
    copied = _rows_on(target)
    assert copied >= 1
    _sweep(target)  # by the map, those rows belong on the source
    assert _rows_on(target) == copied
    _move_ends_with_the_entity_found(moving, link, staying)


@pytest.mark.parametrize("where", ["staying", "moving"])
def test_a_sweep_by_a_map_older_than_the_flip_keeps_the_targets_rows(monkeypatch, where):
    _source, target = source_and_target()
    key = buckets.id_in_bucket(1000 if where == "staying" else 5)
    link = _link_in_moved_buckets()
    Entity.objects.create(id=key, link=link)
    moving = Mover(plan.start(plan.plan(target, sorted(MOVED_SET))))
    moving.copy()
    before_the_flip = bucket_map.refresh()
    moving.catch_up()  # fences, replays, flips
    rows = _rows_on(target)
    old = dataclasses.replace(before_the_flip, fetched_at=time.monotonic(), max_age=3600.0)
    monkeypatch.setattr(bucket_map, "_cached", old)
    _sweep(target)
    monkeypatch.undo()
    bucket_map.forget()
    assert _rows_on(target) == rows
    _move_ends_with_the_entity_found(moving, link, key)


def test_a_move_into_the_shard_waits_for_the_sweeps_delete(monkeypatch):
    """The states are read in the DELETE's transaction, the generation row locked: a move
    aborted, then run again, between the sweep's batch and its delete, copies its rows only
    after that delete (found by a hostile review: read apart, "no state" held until the
    second move's copy, which the delete then removed)."""
    _source, target = source_and_target()
    staying = buckets.id_in_bucket(1000)
    link = _link_in_moved_buckets()
    Entity.objects.create(id=staying, link=link)
    first = Mover(plan.start(plan.plan(target, sorted(MOVED_SET))))
    first.copy()
    assert _rows_on(target) >= 1
    real_delete, real_matching = index_rows.delete_not_held, index_rows.delete_matching
    second: list[threading.Thread] = []
    errors: list[BaseException] = []

    def move_again() -> None:
        try:
            Mover(plan.start(plan.plan(target, sorted(MOVED_SET)))).copy()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    def aborted_first(*args: Any) -> int:  # after the sweep read its batch
        first.abort()
        return real_delete(*args)

    def matching(*args: Any) -> int:  # the states read: the second move starts meanwhile
        if not second:
            second.append(threading.Thread(target=move_again))
            second[0].start()
            second[0].join(timeout=1.0)
        return real_matching(*args)

    monkeypatch.setattr(index_rows, "delete_not_held", aborted_first)
    monkeypatch.setattr(index_rows, "delete_matching", matching)
    _sweep(target)
    monkeypatch.undo()
    assert second, "the sweep deleted nothing on the target"
    second[0].join(timeout=60)
    assert not errors, errors
    assert _rows_on(target) >= 1  # the second move's copy

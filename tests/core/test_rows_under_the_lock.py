"""A write's new index rows are committed (step 3) only while it holds its entity's row lock
(docs/design.md#write-protocol). Every remover re-checks a row under that lock before it
deletes it: another writer's step 5, a failed write's undo, the cleaner's sweep. A remover
that ran between a write's step 3 and its commit without waiting for it would find the old
state (or no entity), delete a row the commit then needs, and a query would miss the entity
(I2).

Each test runs a remover in another thread right after a write's step 3, lets it run for up to
a second (it waits on the lock, as it must), then lets the write commit. A new row's
``INSERT`` is that lock on MariaDB's driver route: sent before step 3, not with the
``COMMIT`` (writes/with_commit.insert_before_rows)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connections

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from schemaless_store.writes import protocol
from tests.support import STORE
from tests.support.invariants import assert_exact

pytestmark = [STORE, pytest.mark.usefixtures("no_receipt_pruning")]


def _found(link: str) -> list[uuid.UUID]:
    return [e.id for e in Entity.objects.filter_index(link=link)]


@contextmanager
def _between_step_3_and_commit(remover: Callable[[], Any]) -> Iterator[dict[str, Any]]:
    """Start ``remover`` in a thread of its own after the first write's step 3 in the block,
    give it a second, and go on; the block's end waits for it. ``seen["finished_first"]``:
    whether it ended before the write committed (it did not wait for the lock)."""
    original = protocol.Write.add_index_rows
    seen: dict[str, Any] = {"errors": []}

    def body() -> None:
        try:
            remover()
        except BaseException as exc:
            seen["errors"].append(exc)
        finally:
            connections.close_all()

    def hooked(self: protocol.Write) -> None:
        original(self)
        if "thread" not in seen and any(change.rows for change in self.changes):
            seen["thread"] = thread = threading.Thread(target=body)
            thread.start()
            thread.join(timeout=1.0)
            seen["finished_first"] = not thread.is_alive()

    protocol.Write.add_index_rows = hooked  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        protocol.Write.add_index_rows = original  # type: ignore[method-assign]
    assert "thread" in seen, "the remover never ran"
    seen["thread"].join(timeout=60)
    assert not seen["errors"], seen["errors"]


def _sweep() -> None:
    """The cleaner's sweep of index_link on every shard: a row whose entity it does not find
    is an orphan, removed after a re-check under the entity's lock."""
    cleaner = Cleaner(indexes=["index_link"], once=True, batch_size=50)
    for alias in shards.shard_aliases():
        cleaner.run_passes(registry.get("index_link"), alias, ["sweep"])


@pytest.mark.parametrize("how", ["create", "save of a new id"])
def test_a_sweep_during_a_new_entitys_write_waits_for_its_commit(how: str):
    Entity.objects.create(link="https://warm-up")  # connections, the map
    link = f"https://new-{uuid.uuid4()}"
    key = uuid.uuid4()
    with _between_step_3_and_commit(_sweep) as seen:
        if how == "create":
            Entity.objects.create(id=key, link=link)
        else:  # read first under the lock: a missing row, which takes no lock
            Entity.from_properties({"id": key, "link": link}).save()
    print("the sweep ended before the commit:", seen["finished_first"])
    assert _found(link) == [key]
    assert_exact()


@pytest.mark.parametrize("how", ["update", "save"])
def test_another_writer_of_the_entity_waits_for_a_writes_lock_between_its_rows_and_commit(
    how: str,
):
    """An update holds the row's lock from step 1: another writer of the entity, started
    between this write's step 3 and its commit, waits in its own locking read, then commits
    after it (its step 5 then removes this write's row, which its state no longer implies).
    A write that committed its rows without the lock let such a writer's step 5 run first and
    delete a row this write's commit needed (the withdrawn route of docs/design.md)."""
    entity = Entity.objects.create(link="https://a")

    def other() -> None:
        Entity.objects.filter(id=entity.id).update(link="https://b")

    with _between_step_3_and_commit(other) as seen:
        if how == "update":
            Entity.objects.filter(id=entity.id).update(link="https://a2")
        else:
            entity["link"] = "https://a2"
            entity.save()
    assert not seen["finished_first"]  # it waited for this write's lock
    stored = Entity.objects.get(id=entity.id)["link"]
    assert stored == "https://b"  # committed after this write
    assert _found(stored) == [entity.id]
    assert_exact()

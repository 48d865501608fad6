"""The entity cache, the near cache and step 6 after a lost commit answer (issue 43, finding
3; docs/cache.md#a-lost-commit-answer): the write's session may still commit while its answer
is lost, so the write invalidates (and undoes its index rows) only once that session is gone
and its receipt has said what landed.

Each test loses the answer of a write's commit while the server still runs it (the client's
``read_timeout`` ends its wait; another client holds a lock the commit's query waits on), and
lets the old session commit just before the write asks for its receipt. Before that, a reader
in this process reads the entity. Invalidated too early, the reader's fill of the old row (or
step 6's removal of the create's index row) outlives the write's acknowledged commit."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connections
from django.test import override_settings

from schemaless_store.cache import entity_cache, near_cache
from schemaless_store.models import Entity
from schemaless_store.tables import cells as cell_table
from schemaless_store.tables import receipts as receipt_table
from schemaless_store.writes import receipts as write_receipts
from tests.cache.test_entity_cache import redis_server
from tests.support import STORE

pytestmark = [STORE, pytest.mark.mariadb_only]

TIMEOUT = 1  # the writer's read_timeout, seconds: its answer is lost after about 3 s


@pytest.fixture(params=["redis", "near"])
def cache_on(request: pytest.FixtureRequest) -> Iterator[str]:
    """The entity cache on a real Redis, with the near cache in front of it or not; entity
    history on (its next version's key is what the held lock stands on)."""
    caches_setting = {**settings.CACHES, "entities": redis_server().cache_config()}
    raw = {**settings.SCHEMALESS, "CACHE": "entities", "HISTORY": True}
    if request.param == "near":
        raw["NEAR_CACHE"] = {"DROP_TIMEOUT": 5.0}
    with override_settings(CACHES=caches_setting, SCHEMALESS=raw):
        caches["entities"].clear()
        entity_cache.reset_stats()
        entity_cache.resume()
        try:
            if request.param == "near":
                _near_live()
            yield request.param
        finally:
            near_cache.shut()
            entity_cache.resume()


def _near_live() -> None:
    """Wait until this process's near cache serves (its tracking connection live)."""
    through = entity_cache.lookup()
    assert through is not None and through.near is not None
    deadline = time.monotonic() + 10
    while not through.near.usable():
        assert time.monotonic() < deadline, "the tracking connection never came up"
        time.sleep(0.01)


def _short_reads(monkeypatch: pytest.MonkeyPatch, alias: str) -> None:
    conn = connections[alias]
    conn.close()
    monkeypatch.setitem(conn.settings_dict, "OPTIONS", {**conn.settings_dict["OPTIONS"]})
    conn.settings_dict["OPTIONS"]["read_timeout"] = TIMEOUT


def _in_another_thread(work: Callable[[], Any]) -> Any:
    """``work()`` on connections of its own, as another request of this process would."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as exc:
            out.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _await_row(alias: str, sql: str, params: list[Any]) -> None:
    """Wait until ``sql`` finds a committed row (the old session's commit)."""
    reader = connections.create_connection(alias)
    try:
        deadline = time.monotonic() + 15
        while True:
            with reader.cursor() as cursor:
                cursor.execute(sql, params)
                if cursor.fetchone()[0]:
                    return
            assert time.monotonic() < deadline, "the old session never committed"
            time.sleep(0.02)
    finally:
        reader.close()


def _cached_entity() -> Entity:
    """A new entity, read three times: cached (and copied, with the near cache)."""
    entity = Entity.objects.create(title="old", views=1)
    for _ in range(3):
        assert Entity.objects.get(id=entity.id)["views"] == 1
    return entity


def _holding_the_next_version(alias: str, key: uuid.UUID) -> Any:
    """A connection holding the entity's next history version's key, uncommitted: a save's
    commit query waits on it (its answer lost after ``read_timeout``) until the holder rolls
    back."""
    holder = connections.create_connection(alias)
    holder.set_autocommit(False)
    with holder.cursor() as cursor:
        cursor.execute(
            "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
            "VALUES (%s, %s, 2, NULL, NOW(6))",
            [key.bytes, cell_table.ENTITY_COLUMN],
        )
    return holder


def _await_next_version(alias: str, key: uuid.UUID) -> None:
    """Wait until the old session's commit of the save's version lands."""
    _await_row(
        alias,
        "SELECT COUNT(*) FROM cell WHERE row_key = %s AND column_name = %s AND ref_key = 2",
        [key.bytes, cell_table.ENTITY_COLUMN],
    )


def _save_views_2(monkeypatch: pytest.MonkeyPatch, entity: Entity, holder: Any) -> None:
    """``views = 2``, saved with a short ``read_timeout``: its commit's answer is lost while
    ``holder`` holds the next version's key; then every patch of the test is undone."""
    alias = entity.shard
    _short_reads(monkeypatch, alias)
    try:
        entity["views"] = 2
        entity.save()
    finally:
        connections[alias].close()
        holder.close()
    monkeypatch.undo()


def _before_the_recall(monkeypatch: pytest.MonkeyPatch, first: Callable[[], None]) -> list[Any]:
    """Run ``first()`` once, when the write has lost its answer and is about to ask for its
    receipt; returns the receipts the write then read."""
    recall = write_receipts.recall
    found: list[Any] = []

    def recall_later(write: Any, lost: Any) -> Any:
        if not found:
            first()
        found.append(recall(write, lost))
        return found[-1]

    monkeypatch.setattr(write_receipts, "recall", recall_later)
    return found


def _read_twice(key: uuid.UUID) -> int:
    """A reader's ``get``, twice: a miss's row is stored in Redis with the thread's next read."""
    Entity.objects.get(id=key)
    return int(Entity.objects.get(id=key)["views"])


def test_a_save_that_landed_late_is_not_hidden_by_a_reader_fill(
    cache_on: str, monkeypatch: pytest.MonkeyPatch
):
    """A save's commit query waits at its history version (another client holds the
    version's key) past ``read_timeout``. A reader reads the entity, then the lock goes and
    the old session commits; the receipt says it landed. The writer's process must read the
    save, not the reader's fill of the row before it."""
    entity = _cached_entity()
    alias, key = entity.shard, entity.id
    holder = _holding_the_next_version(alias, key)
    read: list[int] = []

    def reader_then_commit() -> None:
        read.append(_in_another_thread(lambda: _read_twice(key)))
        holder.connection.rollback()  # the driver's: the old session's query goes on
        _await_next_version(alias, key)

    found = _before_the_recall(monkeypatch, reader_then_commit)
    _save_views_2(monkeypatch, entity, holder)
    assert read == [1] and found and found[0] is not None  # it landed, as the receipt says
    assert [v.properties["views"] for v in entity.history()] == [1, 2]
    assert Entity.objects.get(id=key)["views"] == 2, "the cache hides the acknowledged save"
    assert Entity.objects.get_many([key])[key]["views"] == 2


def test_a_reader_is_not_served_the_old_row_once_a_lost_commit_has_landed(
    cache_on: str, monkeypatch: pytest.MonkeyPatch
):
    """A 30-minute history soak (2026-11-28, seed 4911) saw a reader served the old row from
    Redis after another process had read the new one from the shard: the commit had landed,
    its answer was lost, and the write invalidated only after its recall. The write now also
    invalidates at once when its answer is lost; a reader after the commit landed, before the
    recall, reads it."""
    entity = _cached_entity()
    alias, key = entity.shard, entity.id
    holder = _holding_the_next_version(alias, key)
    read: list[int] = []

    def commit_then_read() -> None:
        holder.connection.rollback()  # the driver's: the old session's query goes on
        _await_next_version(alias, key)
        read.append(_in_another_thread(lambda: _read_twice(key)))

    found = _before_the_recall(monkeypatch, commit_then_read)
    _save_views_2(monkeypatch, entity, holder)
    assert found and found[0] is not None  # it landed, as the receipt says
    assert read == [2], "a reader was served the old row after the commit had landed"
    assert Entity.objects.get(id=key)["views"] == 2


class Interrupted(BaseException):
    pass


def test_an_interrupt_during_the_first_invalidation_still_settles(
    cache_on: str, monkeypatch: pytest.MonkeyPatch
):
    """The first invalidation of a lost answer is a round trip to Redis: an interrupt there
    (a signal handler's exception) skips the recall, so the write's outcome stays unknown.
    The write still settles as unknown (invalidates again, and this process reads the shards
    only, for ``CACHE_TIMEOUT``), as when the recall itself is interrupted."""
    entity = Entity.objects.create(title="old", views=1)
    alias, key = entity.shard, entity.id
    holder = _holding_the_next_version(alias, key)
    invalidate = entity_cache.invalidate
    calls: list[list[bytes]] = []

    def interrupted_once(ids: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(list(ids))
        if len(calls) == 1:
            raise Interrupted()
        return invalidate(ids, *args, **kwargs)

    monkeypatch.setattr(entity_cache, "invalidate", interrupted_once)
    _short_reads(monkeypatch, alias)
    try:
        entity["views"] = 2
        with pytest.raises(Interrupted):
            entity.save()
    finally:
        connections[alias].close()
        holder.connection.rollback()
        holder.close()
    monkeypatch.undo()
    assert calls == [[key.bytes], [key.bytes]]  # the first, interrupted; then settle's
    assert not entity_cache.enabled()  # the outcome is unknown: the shards only, for a while


def test_a_create_that_landed_late_keeps_its_index_rows(
    cache_on: str, monkeypatch: pytest.MonkeyPatch
):
    """A create's commit query waits at its first statement, the receipt's ``INSERT``
    (another client holds a gap lock on the receipt's key), past ``read_timeout``; its index
    row was committed before (step 3). The lock goes and the old session commits before the
    receipt is read. Step 6 must not have removed the index row of the create that landed."""
    key = uuid.uuid4()
    alias = Entity(id=key).shard
    Entity.objects.create(id=uuid.uuid4(), title="warm")
    assert Entity.objects.get_many([key]) == {}  # an absence, cached
    holder = connections.create_connection(alias)
    holder.ensure_connection()
    holder.set_autocommit(False)
    with holder.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    record = write_receipts.record
    held: list[bytes] = []

    def record_then_hold(write: Any, transaction: Any) -> Any:
        recorded = record(write, transaction)  # (created, session)
        if not held:  # the first try's receipt key: a gap lock on it
            held.append(write.write_id)
            with holder.cursor() as cursor:
                cursor.execute(
                    f"SELECT result FROM {receipt_table.TABLE} "
                    "WHERE created = %s AND write_id = %s FOR UPDATE",
                    [recorded[0], write.write_id],
                )
        return recorded

    def reader_then_commit() -> None:
        _in_another_thread(lambda: [Entity.objects.get_many([key]) for _ in range(2)])
        holder.connection.rollback()  # the receipt's INSERT goes on, and the create commits
        _await_row(alias, "SELECT COUNT(*) FROM entities WHERE id = %s", [key.bytes])

    monkeypatch.setattr(write_receipts, "record", record_then_hold)
    found = _before_the_recall(monkeypatch, reader_then_commit)
    _short_reads(monkeypatch, alias)
    link = f"https://late/{key}"
    try:
        made = Entity.objects.create(id=key, title="late", link=link)
    finally:
        connections[alias].close()
        holder.close()
    monkeypatch.undo()
    assert held and found and found[0] is not None  # it landed, as the receipt says
    assert made.id == key
    assert [e.id for e in Entity.objects.filter_index(link=link)] == [key], (
        "step 6 removed the index row of the create that landed"
    )
    assert Entity.objects.get(id=key)["title"] == "late"


def test_an_unknown_outcome_keeps_this_process_off_the_cache(
    cache_on: str, monkeypatch: pytest.MonkeyPatch
):
    """A lost answer whose shard then refuses every connection for ``RECEIPT_WAIT``:
    ``OutcomeUnknown``. The old session may not be gone, so a commit may still follow the
    invalidation: this process reads the database only, for ``CACHE_TIMEOUT``, as after a
    failed invalidation, and a caller that reads the entity to decide sees what is stored."""
    from schemaless_store.exceptions import OutcomeUnknown
    from schemaless_store.testing.faults import lost_commit_answers
    from tests.core.test_receipts import refusing_connections

    entity = Entity.objects.create(title="old", views=1)
    for _ in range(3):
        Entity.objects.get(id=entity.id)
    entity["views"] = 2
    quick = override_settings(SCHEMALESS={**settings.SCHEMALESS, "RECEIPT_WAIT": 0.5})
    try:
        with (
            quick,
            pytest.raises(OutcomeUnknown),
            lost_commit_answers(after_commit=refusing_connections(monkeypatch)),
        ):
            entity.save()
    finally:
        monkeypatch.undo()
    assert not entity_cache.enabled()
    assert Entity.objects.get(id=entity.id)["views"] == 2

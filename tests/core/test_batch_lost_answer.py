"""A lost answer to the batched commit while the server still runs the batch
(docs/design.md#receipts, #round-trips): the client's ``read_timeout`` ends its wait, and the
server session, still waiting on a row lock inside the batch, goes on and commits later.

Before the receipt is read, the store ends that session (``KILL`` on the node it ran on, then
waits until the process list no longer shows it): only then does "absent" mean the batch will
never commit. Without that, a batch still waiting (even at its first statement, the receipt's
``INSERT``) commits beside the write's next try: a ``create`` that landed answered
``EntityExists``, an update applied twice."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings

from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.models import Entity
from schemaless_store.tables import cells as cell_table
from schemaless_store.tables import receipts as receipt_table
from schemaless_store.topology import retries
from schemaless_store.writes import protocol
from tests.support import STORE

pytestmark = [STORE, pytest.mark.mariadb_only]

HISTORY = override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})
TIMEOUT = 1  # the store's read_timeout in these tests, seconds (the client waits up to 3x)
HELD = 8.0  # how long the other client holds the lock the batch waits on


def _short_reads(monkeypatch: pytest.MonkeyPatch, alias: str) -> Any:
    conn = connections[alias]
    conn.close()
    monkeypatch.setitem(conn.settings_dict, "OPTIONS", {**conn.settings_dict["OPTIONS"]})
    conn.settings_dict["OPTIONS"]["read_timeout"] = TIMEOUT
    return conn


def _release_later(holder: Any, held: float = HELD) -> threading.Thread:
    def release() -> None:
        time.sleep(held)
        holder.connection.rollback()  # the driver's: the main thread is in the write

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def _entity_rows(alias: str, key: uuid.UUID) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM entities WHERE id = %s", [key.bytes])
        return int(cursor.fetchone()[0])


def _assert_applied_once(write: str, alias: str, key: uuid.UUID, receipts: int, made: Any) -> None:
    """The write landed once: one version more (two for an update of the first), one receipt
    more, and a create's ``added_id`` the stored row's."""
    stored = Entity.objects.get(id=key)
    assert stored["views"] == 2
    assert [v.properties["views"] for v in stored.history()] == (
        [1, 2] if write == "update" else [2]
    )
    assert receipt_table.count(alias) == receipts + 1
    if write == "create":
        assert made.added_id == stored.added_id
        assert _entity_rows(alias, key) == 1


@pytest.mark.parametrize("indexed", [False, True], ids=["unindexed", "indexed"])
@pytest.mark.parametrize("held", [1.5, HELD], ids=["freed-in-time", "held-past-every-try"])
def test_a_create_whose_answer_is_lost_while_its_insert_waits_lands_once_or_not_at_all(
    monkeypatch: pytest.MonkeyPatch, indexed: bool, held: float
):
    """Another client holds the new id's key (an uncommitted INSERT of it, rolled back after
    ``held`` seconds): the create's ``INSERT`` waits there past the client's read_timeout (a
    lost answer). Unindexed, the ``INSERT`` is in the commit's batch: the store ends that
    session and reads the receipt before it tries again. Indexed, the ``INSERT`` goes alone
    before the index rows (docs/design.md#rows-under-the-lock): no ``COMMIT`` was sent, the
    try on a fresh connection waits again. Freed in time, the create lands once and answers
    the id it made (never ``EntityExists``); held past every try (``LOST_ATTEMPTS``), it raises
    ``ShardUnavailable`` and nothing of it was committed: no row, no receipt, no index row."""
    key = uuid.uuid4()
    alias = Entity(id=key).shard
    Entity.objects.create(id=uuid.uuid4(), title="warm")  # the shard's tables and connection
    link = {"link": f"https://{key}"} if indexed else {}
    holder = connections.create_connection(alias)
    made: Any = None
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute(
                "INSERT INTO entities (id, updated, body) VALUES (%s, NOW(6), %s)",
                [key.bytes, b""],
            )
        conn = _short_reads(monkeypatch, alias)
        receipts = receipt_table.count(alias)
        losses: list[bool] = []
        real_retry = protocol.retry_after_loss

        def counted(*args: Any) -> bool:
            losses.append(real_retry(*args))
            return losses[-1]

        monkeypatch.setattr(protocol, "retry_after_loss", counted)
        thread = _release_later(holder, held)
        try:
            if held < HELD:
                made = Entity.objects.create(id=key, title="mine", **link)
            else:
                with pytest.raises(ShardUnavailable):
                    Entity.objects.create(id=key, title="mine", **link)
        finally:
            thread.join()
            conn.close()
    finally:
        holder.close()
    monkeypatch.undo()
    connections[alias].close()
    assert losses and losses[0], losses  # an answer was lost, and the write tried again
    found = [e.id for e in Entity.objects.filter_index(link=link["link"])] if indexed else []
    if made is None:
        assert _entity_rows(alias, key) == 0
        assert receipt_table.count(alias) == receipts
        assert found == []
        return
    assert _entity_rows(alias, key) == 1
    stored = Entity.objects.get(id=key)
    assert stored["title"] == "mine"
    assert made.added_id == stored.added_id
    assert receipt_table.count(alias) == receipts + 1
    assert found == ([key] if indexed else [])


@HISTORY
def test_an_update_whose_answer_is_lost_while_its_version_waits_is_applied_once(
    monkeypatch: pytest.MonkeyPatch,
):
    """Another client holds the key of the entity's next history version (an uncommitted
    INSERT of it, rolled back later): the update's batch waits at the version's INSERT past
    the client's read_timeout. The store ends that session (``KILL``: its transaction, the
    receipt with it, rolled back), reads no receipt, and runs the update again, which lands
    once the key is free: one version and one receipt, never a failure. (Held longer than
    the write's tries on fresh connections, ``LOST_ATTEMPTS``, the save would raise
    ``ShardUnavailable``: ended, it certainly did not land.)"""
    entity = Entity.objects.create(title="old", views=1)
    alias = entity.shard
    holder = connections.create_connection(alias)
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute(  # the next version's key, uncommitted
                "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
                "VALUES (%s, %s, 2, NULL, NOW(6))",
                [entity.id.bytes, cell_table.ENTITY_COLUMN],
            )
        conn = _short_reads(monkeypatch, alias)
        receipts = receipt_table.count(alias)
        thread = _release_later(holder, HELD / 4)  # within the write's tries
        try:
            entity["views"] = 2
            entity.save()
        finally:
            thread.join()
            conn.close()
    finally:
        holder.close()
    monkeypatch.undo()
    connections[alias].close()
    assert Entity.objects.get(id=entity.id)["views"] == 2
    assert [v.properties["views"] for v in entity.history()] == [1, 2]
    assert receipt_table.count(alias) == receipts + 1


@HISTORY
@pytest.mark.parametrize("write", ["update", "create"])
def test_a_lock_wait_timeout_in_the_middle_of_the_batch_is_retried(
    write: str, monkeypatch: pytest.MonkeyPatch
):
    """The server's lock wait ends first (``innodb_lock_wait_timeout`` 1 s, error 1205, which
    rolls back only the statement, the receipt and an update's ``UPDATE`` before it staying):
    the store rolls the transaction back and runs the write again on the same connection,
    which lands once the other client lets go: one row, one version, one receipt."""
    entity = Entity.objects.create(title="old", views=1)
    alias = entity.shard
    key = entity.id if write == "update" else uuid.uuid4()
    if write == "create":
        alias = Entity(id=key).shard
    holder = connections.create_connection(alias)
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            if write == "update":  # the key of the entity's next history version
                cursor.execute(
                    "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
                    "VALUES (%s, %s, 2, NULL, NOW(6))",
                    [key.bytes, cell_table.ENTITY_COLUMN],
                )
            else:  # the new entity's key
                cursor.execute(
                    "INSERT INTO entities (id, updated, body) VALUES (%s, NOW(6), %s)",
                    [key.bytes, b""],
                )
        conn = connections[alias]
        conn.close()
        monkeypatch.setitem(conn.settings_dict, "OPTIONS", {**conn.settings_dict["OPTIONS"]})
        conn.settings_dict["OPTIONS"]["init_command"] = "SET innodb_lock_wait_timeout = 1"
        receipts = receipt_table.count(alias)
        retried = retries.retries_made()

        def release() -> None:
            time.sleep(1.5)
            holder.connection.rollback()  # the driver's: the main thread is in the write

        thread = threading.Thread(target=release)
        thread.start()
        try:
            if write == "update":
                entity["views"] = 2
                entity.save()
            else:
                made = Entity.objects.create(id=key, title="new", views=2)
        finally:
            thread.join()
        assert retries.retries_made() > retried
        with conn.cursor() as cursor:
            cursor.execute("SELECT @@in_transaction")
            assert cursor.fetchone()[0] == 0
        conn.close()
    finally:
        holder.close()
    monkeypatch.undo()
    _assert_applied_once(write, alias, key, receipts, made if write == "create" else None)


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_a_recalled_create_under_a_moves_capture_triggers_returns_its_own_added_id(
    history: bool,
):
    """While a move captures the shard's changes, every entity ``INSERT`` fires a trigger
    that inserts into the move log, an ``AUTO_INCREMENT`` table of its own: the receipt's
    ``added_id`` (``LAST_INSERT_ID()``) is still the entity's, after a lost answer too."""
    from schemaless_store.tables import move_log
    from schemaless_store.tables.moved_rows import moved_tables
    from schemaless_store.testing.faults import lost_commit_answers

    key = uuid.uuid4()
    alias = Entity(id=key).shard
    with HISTORY if history else override_settings():
        Entity.objects.create(id=uuid.uuid4(), title="warm")
        move_log.install(alias, moved_tables())
        try:
            # The log's ids far from the entities' (chance made them meet now and then when
            # both were small), so that an added_id taken from the log is seen for what it is.
            with connections[alias].cursor() as cursor:
                cursor.execute(f"ALTER TABLE {move_log.LOG} AUTO_INCREMENT = 1000000000")
            with lost_commit_answers(aliases=[alias]) as lost:
                made = Entity.objects.create(id=key, title="mine", link=f"https://{key}")
            assert lost.lost == 1
            logged = move_log.read(alias, 1000)
        finally:
            move_log.remove(alias, moved_tables())
    seqs = [seq for seq, _tbl, row_key in logged if bytes(row_key) == key.bytes]
    assert seqs  # the trigger ran on the create's INSERT
    stored = Entity.objects.get(id=key).added_id
    assert min(seqs) >= 1_000_000_000 > stored  # a mix-up of the two ids would show
    assert made.added_id == stored


@HISTORY
@pytest.mark.parametrize("write", ["update", "create"])
def test_a_lost_answer_whose_receipt_insert_still_waits_is_ended_before_the_receipt_is_read(
    write: str, monkeypatch: pytest.MonkeyPatch
):
    """Another client holds a gap lock on the write's own receipt key (a locking read of it
    at ``REPEATABLE READ``, taken just before the batch is sent): the batch's first statement,
    the receipt ``INSERT``, waits there past the client's ``read_timeout``. The receipt read
    after the lost answer does not wait on that lock (gap locks do not conflict), so it says
    "absent" while the old session still runs the batch; the lock is let go right after that
    read. Unless the old session is ended first (``KILL``, then gone from the process list),
    it then commits beside the write's next try: applied twice, or ``EntityExists`` for a
    create that landed."""
    from schemaless_store.writes import receipts as write_receipts

    entity = Entity.objects.create(title="old", views=1)
    key = entity.id if write == "update" else uuid.uuid4()
    alias = Entity(id=key).shard
    Entity.objects.create(id=uuid.uuid4(), title="warm")
    holder = connections.create_connection(alias)
    holder.ensure_connection()
    holder.set_autocommit(False)
    with holder.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    record, find = write_receipts.record, receipt_table.find
    recalls: list[dict[str, int] | None] = []
    held: list[bytes] = []

    def record_then_hold(the_write: Any, transaction: Any) -> Any:
        recorded = record(the_write, transaction)  # (created, session)
        if not held:  # once: the first try's key
            held.append(the_write.write_id)
            with holder.cursor() as cursor:
                cursor.execute(
                    f"SELECT result FROM {receipt_table.TABLE} "
                    "WHERE created = %s AND write_id = %s FOR UPDATE",
                    [recorded[0], the_write.write_id],
                )
                assert cursor.fetchall() == ()
        return recorded

    def find_then_release(*args: Any, **kwargs: Any) -> receipt_table.Lookup:
        found = find(*args, **kwargs)
        recalls.append(found.result)
        holder.connection.rollback()  # the driver's: the lock goes after the read
        return found

    receipts = receipt_table.count(alias)
    conn = _short_reads(monkeypatch, alias)
    monkeypatch.setattr(write_receipts, "record", record_then_hold)
    monkeypatch.setattr(receipt_table, "find", find_then_release)
    try:
        if write == "update":
            entity["views"] = 2
            entity.save()
        else:
            made = Entity.objects.create(id=key, title="mine", views=2)
    finally:
        conn.close()
        holder.close()
    monkeypatch.undo()
    connections[alias].close()
    assert recalls == [None]  # the answer was lost while the INSERT waited; it had not landed
    _assert_applied_once(write, alias, key, receipts, made if write == "create" else None)

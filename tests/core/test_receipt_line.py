"""The receipts' pruned line (issue 43; docs/design.md#receipts, "The horizon"), on either
backend: every removal raises the shard's line over what it deletes, in its own transaction,
and a retry that finds no receipt at or below the line raises ``OutcomeUnknown``, whatever
``RECEIPT_RETENTION`` the process that pruned had; above it, the write runs again. The
MariaDB case with a lost commit answer is tests/core/test_receipt_horizon_review.py."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections, transaction
from django.test import override_settings

from schemaless_store.exceptions import OutcomeUnknown, ShardUnavailable
from schemaless_store.sql import dialects
from schemaless_store.tables import receipts as receipt_table
from schemaless_store.topology import shards
from schemaless_store.topology.write_lock import write_lock
from schemaless_store.writes import receipts
from schemaless_store.writes.protocol import Change, Write, run
from tests.core.test_receipt_horizon import _Clock
from tests.support import STORE

pytestmark = [STORE, pytest.mark.usefixtures("no_receipt_pruning")]

SHORTER = override_settings(SCHEMALESS={**settings.SCHEMALESS, "RECEIPT_RETENTION": 60})


def _shard_now(alias: str) -> int:
    now = dialects.of(shards.connection(alias)).unix_now
    return int(shards.read(alias, f"SELECT {now}", [])[0][0])


def _add(alias: str, *created: int) -> list[bytes]:
    ids = [uuid.uuid4().bytes for _ in created]
    with transaction.atomic(using=alias), shards.statement_cursor(shards.connection(alias)) as c:
        for write_id, when in zip(ids, created, strict=True):
            receipt_table.record(c, write_id, when, {"written": 1})
    return ids


def _there(alias: str, write_id: bytes, created: int) -> bool:
    """Whether the receipt is on ``alias`` (read as a test does, without the line)."""
    sql = f"SELECT 1 FROM {receipt_table.TABLE} WHERE created = %s AND write_id = %s"
    return bool(shards.read(alias, sql, [created, write_id]))


def _drained(alias: str) -> None:
    while receipts.prune(alias):  # what earlier tests left expired
        pass


def _start_line(alias: str, seconds_ago: int) -> None:
    """Put the line back (a test's own statement: no pruner ever lowers it), as on a store
    whose pruners all kept the default retention."""
    now = dialects.of(shards.connection(alias)).unix_now
    with connections[alias].cursor() as cursor:
        cursor.execute(
            f"UPDATE {receipt_table.HORIZON} SET pruned = {now} - %s WHERE id = 0", [seconds_ago]
        )


def _lost(alias: str) -> ShardUnavailable:
    return ShardUnavailable(alias, "lost", lost=True)


def test_a_removal_raises_the_line_and_deletes_only_at_or_below_it():
    """The line follows the retention of whichever process prunes, by the shard's clock, and
    never comes down: a process keeping 600 s after one keeping 60 s leaves it where the
    shorter one put it, and deletes nothing above it."""
    alias = shards.shard_aliases()[0]
    _start_line(alias, 100_000)
    with connections[alias].cursor() as cursor:  # earlier tests' receipts, whatever their age
        cursor.execute(f"DELETE FROM {receipt_table.TABLE}")
    now = _shard_now(alias)
    expired, middle, fresh = now - 700, now - 200, now
    ids = _add(alias, expired, middle, fresh)
    before = _shard_now(alias)
    assert receipts.prune(alias) == 1
    line = receipt_table.pruned(alias)
    assert line is not None and before - 601 <= line <= _shard_now(alias) - 601
    assert not _there(alias, ids[0], expired) and _there(alias, ids[1], middle)
    with SHORTER:
        before = _shard_now(alias)
        assert receipts.prune(alias) == 1
    shorter = receipt_table.pruned(alias)
    assert shorter is not None and before - 61 <= shorter <= _shard_now(alias) - 61
    assert not _there(alias, ids[1], middle) and _there(alias, ids[2], fresh)
    assert receipts.prune(alias) == 0
    assert receipt_table.pruned(alias) == shorter  # never lowered
    assert _there(alias, ids[2], fresh)


def test_a_receipt_absent_at_or_below_the_line_is_an_unknown_outcome_above_it_runs_again():
    """Right after a pruner keeping 60 s ran, this process (keeping 600 s) asks for receipts
    that are not there: at the line, ``OutcomeUnknown`` naming the line (the local guard
    alone, 60 s against 600, would have said "did not land"); one second above it, ``None``:
    the write runs again."""
    alias = shards.shard_aliases()[0]
    _start_line(alias, 100_000)
    with SHORTER:
        receipts.prune(alias)
    line = receipt_table.pruned(alias)
    assert line is not None
    at = Write(alias, [Change(uuid.uuid4().bytes, rows=set())])
    at.receipt_created = line
    with pytest.raises(OutcomeUnknown) as raised:
        receipts.recall(at, _lost(alias))
    assert "pruned line" in str(raised.value) and str(line) in str(raised.value)
    above = Write(alias, [Change(uuid.uuid4().bytes, rows=set())])
    above.receipt_created = line + 1
    assert receipts.recall(above, _lost(alias)) is None


def test_a_landed_write_whose_receipt_a_shorter_retention_removed_is_never_run_again(
    monkeypatch,
):
    """A write lands with its receipt 200 s old by the shard's clock (its writer's clock set
    back: a retry that comes 200 s late); a process keeping 60 s removes the receipt; this
    process, keeping 600 s, then recalls the write as after a lost commit answer. Before the
    line, "absent" 200 s in was taken as "did not land" (and run again: +2 for +1); now it is
    ``OutcomeUnknown``."""
    key = uuid.uuid4().bytes
    write = Write(shards.shard_aliases()[0], [Change(key, rows=set())])

    def store(write: Write) -> dict[str, int]:
        return {"deleted": 1}

    monkeypatch.setattr(receipts, "time", _Clock(-200))
    run(write, store)  # on the shard that owns the key's bucket (NotOwner moves it there)
    monkeypatch.setattr(receipts, "time", time)
    alias = write.alias
    assert _there(alias, write.write_id, write.receipt_created)
    _start_line(alias, 100_000)
    with SHORTER:
        _drained(alias)
    assert not _there(alias, write.write_id, write.receipt_created)
    with pytest.raises(OutcomeUnknown, match="pruned line"):
        receipts.recall(write, _lost(alias))


def test_concurrent_pruners_and_a_retry_never_see_a_removal_without_its_line():
    """Three pruners at once, each call with another retention (300 s down to 60 s, a second
    a call), remove small batches, so that the line rises through 900 receipts (three a
    second, 1-300 s old), removals right at it, while a retry reads the oldest receipt above
    the line over and over: every receipt it finds missing is at or below the line it read
    in the same statement (a line raised apart from its removal, even just after it, fails
    here). They end with the line at the shortest retention's age and every receipt above
    it still there; no pruner fails (MariaDB: no deadlock between them or with the retry,
    the line's row taken first)."""
    alias = shards.shard_aliases()[0]
    _start_line(alias, 100_000)
    _drained(alias)
    now = _shard_now(alias)
    created = [now - 1 - i // 3 for i in range(900)]
    made = sorted(zip(_add(alias, *created), created, strict=True), key=lambda m: m[1])
    stop = threading.Event()
    failures: list[BaseException] = []
    seen = {"missing": 0, "reads": 0}

    retentions = list(range(300, 59, -1))  # the next one a pruner takes: the line's pace
    taking = threading.Lock()

    def pruner() -> None:
        try:
            while True:
                with taking:
                    if not retentions:
                        return
                    retention = retentions.pop(0)
                with write_lock():
                    receipt_table.remove_expired(alias, retention, limit=5)
                time.sleep(0.01)
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    def retry() -> None:
        left = list(made)
        try:
            while left and not stop.is_set():
                write_id, created = left[0]
                lookup = receipt_table.find(alias, write_id, created, galera=False)
                seen["reads"] += 1
                if lookup.result is None:
                    seen["missing"] += 1
                    assert lookup.pruned is not None and created <= lookup.pruned, (
                        f"receipt {created} missing above the line {lookup.pruned}"
                    )
                    # The next to read: the oldest receipt above the line, the one at risk.
                    left = [m for m in left if m[1] > lookup.pruned]
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    pruners = [threading.Thread(target=pruner) for _ in range(3)]
    reader = threading.Thread(target=retry)
    for thread in [*pruners, reader]:
        thread.start()
    for thread in pruners:
        thread.join(120)
    stop.set()
    reader.join(60)
    assert not failures, failures
    assert seen["missing"] > 50, seen
    with SHORTER:
        _drained(alias)
    line = receipt_table.pruned(alias)
    assert line is not None and line >= now - 61
    for write_id, created in made:
        assert _there(alias, write_id, created) == (created > line)


def test_a_store_from_before_the_line_gets_it_at_migrate(caplog):
    """A shard deployed before the line has receipts but no line table. Until ``migrate``
    runs there, a prune removes nothing (and logs what to run) and a retry that finds no
    receipt is ``OutcomeUnknown``; ``migrate`` creates the line, starting at the lowest
    retention any version prunes by (60 s) less the clock margin, by the shard's clock,
    without touching the receipts; from then on a prune removes and raises it."""
    alias = shards.shard_aliases()[-1]
    _drained(alias)
    now = _shard_now(alias)
    old, fresh = _add(alias, now - 700, now)
    with connections[alias].cursor() as cursor:
        cursor.execute(f"DROP TABLE {receipt_table.HORIZON}")
    try:
        with caplog.at_level(logging.WARNING, logger="schemaless_store.writes"):
            assert receipts.prune(alias) == 0
        assert "run manage.py migrateall" in caplog.text
        assert _there(alias, fresh, now)
        # The receipt alone is read: found, the write landed (the line unknown).
        found = receipt_table.find(alias, fresh, now, galera=False)
        assert found.result is not None and found.pruned is None
        absent = Write(alias, [Change(uuid.uuid4().bytes, rows=set())])
        absent.receipt_created = now
        with pytest.raises(OutcomeUnknown, match="no pruned line"):
            receipts.recall(absent, _lost(alias))
        before = _shard_now(alias)
        call_command("migrate", database=alias, verbosity=0)
        line = receipt_table.pruned(alias)
        assert line is not None and before - 51 <= line <= _shard_now(alias) - 51
        assert _there(alias, old, now - 700) and _there(alias, fresh, now)
        call_command("migrate", database=alias, verbosity=0)
        assert receipt_table.pruned(alias) == line  # kept as it is by a later migrate
        assert receipts.prune(alias) == 1
        assert not _there(alias, old, now - 700) and _there(alias, fresh, now)
        assert receipts.recall(absent, _lost(alias)) is None  # above the line: runs again
    finally:
        receipt_table.create_table(alias)


@pytest.mark.mariadb_only
def test_a_prune_is_one_round_trip_on_mariadb():
    """The line's ``UPDATE`` and the batch's ``DELETE`` go in one query with ``BEGIN`` and
    ``COMMIT``: a prune costs the one round trip its ``DELETE`` alone took before."""
    from bench.round_trips import statements

    alias = shards.shard_aliases()[0]
    shards.connection(alias).ensure_connection()
    with statements() as sent:
        receipts.prune(alias)
    assert len(sent) == 1, sent
    (query,) = sent
    assert query.startswith("BEGIN;UPDATE schemaless_receipt_horizon") and "DELETE" in query
    assert query.endswith("COMMIT")

"""Receipts outlive every retry (issue 43, finding 2; docs/design.md#receipts): a receipt is
removed by the shard's clock, never by a pruning process's own; a retry that may come after
its receipt's removal raises ``OutcomeUnknown`` instead of taking "no receipt" for "did not
land" and writing again; and the retention is checked at startup against ``RECEIPT_WAIT``,
the shards' ``read_timeout`` and ``connect_timeout``, and the lock wait
(``schemaless.E010``)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from schemaless_store import checks
from schemaless_store.config import conf
from schemaless_store.exceptions import OutcomeUnknown
from schemaless_store.models import Entity
from schemaless_store.tables import receipts as receipt_table
from schemaless_store.writes import receipts as write_receipts
from tests.support import STORE

pytestmark = STORE

mariadb_only = pytest.mark.mariadb_only


class _Clock:
    """The ``time`` module with a wall clock ``offset`` seconds off (a process whose clock
    is skewed); ``monotonic`` and ``sleep`` are the real ones."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def time(self) -> float:
        return time.time() + self.offset

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _add_one(entity: Entity) -> None:
    entity["n"] = entity.get("n", 0) + 1


def _n(key: uuid.UUID) -> int:
    return int(Entity.objects.get(id=key)["n"])


@mariadb_only
def test_a_pruner_whose_clock_runs_ahead_does_not_remove_a_receipt_a_retry_needs(monkeypatch):
    """Another process, whose clock runs past the retention ahead, removes expired receipts
    between a ``modify``'s landed commit and its retry. The shard's clock decides what is
    expired, so the receipt stays: +1 is applied once, not twice."""
    from schemaless_store.testing.faults import lost_commit_answers

    entity = Entity.objects.create(n=0)
    alias = entity.shard
    pruned: list[int] = []

    def prune_from_the_future() -> None:
        ahead = _Clock(conf.get().receipt_retention + 120)
        with monkeypatch.context() as patched:
            patched.setattr(write_receipts, "time", ahead)
            pruned.append(write_receipts.prune(alias))

    with lost_commit_answers(aliases=[alias], after_commit=prune_from_the_future) as lost:
        Entity.objects.modify(entity.id, _add_one)
    assert lost.lost == 1 and pruned
    assert _n(entity.id) == 1, "the modify was applied again: its receipt was removed"


@mariadb_only
def test_a_retry_that_may_have_outlived_its_receipt_is_an_unknown_outcome(monkeypatch):
    """The writer's clock runs behind the shard's by more than the retention, so its
    receipt, once committed, is already past the horizon, and a pruner on the right clock
    removes it before the retry reads it (as it would after a retry slower than the
    retention). "No receipt" then proves nothing: the write raises ``OutcomeUnknown``, and
    never runs again (+1 stays +1)."""
    from schemaless_store.testing.faults import lost_commit_answers

    entity = Entity.objects.create(n=0)
    alias = entity.shard
    monkeypatch.setattr(write_receipts, "time", _Clock(-(conf.get().receipt_retention + 120)))

    def prune_on_the_right_clock() -> None:
        with monkeypatch.context() as patched:
            patched.setattr(write_receipts, "time", time)
            write_receipts.prune(alias)

    with (
        lost_commit_answers(aliases=[alias], after_commit=prune_on_the_right_clock),
        pytest.raises(OutcomeUnknown) as raised,
    ):
        Entity.objects.modify(entity.id, _add_one)
    monkeypatch.undo()
    assert "retention" in str(raised.value)
    assert _n(entity.id) == 1, "the write ran again after its receipt was removed"


@mariadb_only
def test_a_young_absent_receipt_still_runs_the_write_again():
    """The guard costs nothing in the ordinary case: a commit that did not land, asked well
    within the retention, runs again (once)."""
    from schemaless_store.testing.faults import lost_commit_answers

    entity = Entity.objects.create(n=0)
    with lost_commit_answers(aliases=[entity.shard], land=False) as lost:
        Entity.objects.modify(entity.id, _add_one)
    assert lost.lost == 1
    assert _n(entity.id) == 1


def test_expired_receipts_are_judged_by_the_shards_clock(monkeypatch):
    """A pruning process whose clock runs an hour ahead removes nothing younger than the
    retention by the shard's clock; one whose clock runs behind still removes what expired."""
    from django.db import transaction

    from schemaless_store.topology import shards

    alias = shards.shard_aliases()[0]
    while write_receipts.prune(alias):  # what earlier tests left expired
        pass
    retention = conf.get().receipt_retention
    now = int(time.time())
    with transaction.atomic(using=alias), shards.statement_cursor(shards.connection(alias)) as c:
        receipt_table.record(c, uuid.uuid4().bytes, now, {})
        receipt_table.record(c, uuid.uuid4().bytes, now - int(retention) - 30, {})
    before = receipt_table.count(alias)
    monkeypatch.setattr(write_receipts, "time", _Clock(3600))
    assert write_receipts.prune(alias) == 1
    monkeypatch.setattr(write_receipts, "time", _Clock(-3600))
    assert write_receipts.prune(alias) == 0
    assert receipt_table.count(alias) == before - 1


def _retention_errors(**schemaless: Any) -> list[Any]:
    with override_settings(SCHEMALESS={**settings.SCHEMALESS, **schemaless}):
        return [e for e in checks.check_receipt_retention() if e.id == "schemaless.E010"]


def test_the_retention_is_checked_against_the_longest_retry_at_startup():
    """``schemaless.E010``: a retention shorter than a retry can take (``RECEIPT_WAIT``, and
    on MariaDB the client's wait for a lost answer, a reconnection and the lock wait) is
    refused by ``manage.py check``, naming each part; the defaults pass."""
    assert _retention_errors() == []
    (error,) = _retention_errors(RECEIPT_RETENTION=60, RECEIPT_WAIT=120)
    assert "RECEIPT_RETENTION" in error.msg and "RECEIPT_WAIT" in error.msg
    with override_settings(SCHEMALESS={**settings.SCHEMALESS, "RECEIPT_WAIT": 120}):
        horizon = conf.receipt_horizon(conf.get(), settings.DATABASES)
    assert horizon > 120
    assert _retention_errors(RECEIPT_RETENTION=horizon + 1, RECEIPT_WAIT=120) == []


@mariadb_only
def test_the_retention_check_counts_the_shards_read_timeout_and_lock_wait():
    """On MariaDB the tests' shards read with ``read_timeout`` 60: a lost answer comes up to
    3 x 60 s after its commit was sent, and the retry's own last ask may take as long again,
    so a retention of 300 s is too short for them, and says why."""
    (error,) = _retention_errors(RECEIPT_RETENTION=300)
    assert "read_timeout" in error.msg and "lock wait" in error.msg
    options = settings.DATABASES["shard_0"]["OPTIONS"]
    assert float(options["read_timeout"]) == 60


@mariadb_only
def test_with_database_the_check_reads_the_servers_lock_wait():
    """A server whose ``innodb_lock_wait_timeout`` is 400 s (set globally, not in the
    settings): ``manage.py check --database shard_0`` (as ``migrate`` runs it) reads it and
    finds the default retention too short; without ``--database`` nothing is connected and
    InnoDB's default is assumed."""
    from django.db import connections

    alias = "shard_0"
    admin = connections.create_connection(alias)
    with admin.cursor() as cursor:
        cursor.execute("SELECT @@GLOBAL.innodb_lock_wait_timeout")
        (before,) = cursor.fetchone()
    try:
        with admin.cursor() as cursor:
            cursor.execute("SET GLOBAL innodb_lock_wait_timeout = 400")
        connections[alias].close()  # a new session takes the global value
        assert not [e for e in checks.check_receipt_retention() if e.id == "schemaless.E010"]
        (error,) = [
            e
            for e in checks.check_receipt_retention(databases=[alias])
            if e.id == "schemaless.E010"
        ]
        assert "lock wait of 'shard_0' (innodb_lock_wait_timeout) 400 s" in error.msg
    finally:
        with admin.cursor() as cursor:
            cursor.execute("SET GLOBAL innodb_lock_wait_timeout = %s", [before])
        admin.close()
        connections[alias].close()

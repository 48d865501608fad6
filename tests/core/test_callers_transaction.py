"""A caller's ``transaction.atomic()`` and the store's own sessions (issue 43, finding 1;
docs/design.md#a-callers-transaction).

The store keeps two sessions per shard and thread on MariaDB: Django's connection, which a
caller's ``atomic()`` holds, and the index writer. A lost session must never take the
caller's transaction with it: the store closes only the session that is gone and never a
connection a transaction holds. When the caller's own session is the one lost, the block
fails at its end, as Django reports a lost connection; it never ends committing nothing in
silence."""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import OperationalError, connections, transaction

from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.guards import fence
from schemaless_store.models import Entity
from schemaless_store.tables import index_rows as index_table
from schemaless_store.topology import shards
from schemaless_store.writes.rows import rows_of
from tests.support import STORE
from tests.support.buckets import id_on

pytestmark = [STORE, pytest.mark.mariadb_only]


def _link_on(alias: str) -> str:
    """A ``link`` value whose index row lives on ``alias``."""
    for number in range(10_000):
        link = f"https://example.org/{uuid.uuid4()}/{number}"
        (index, values), *_ = rows_of({"link": link})
        if index_table.home(index, values) == alias:
            return link
    raise AssertionError("no link value lives there")


def _kill(alias: str, session: int) -> None:
    """End server session ``session`` of ``alias`` from a connection of its own, and wait
    until it is gone (as a DBA's ``KILL``, a move's fence or ``wait_timeout`` would)."""
    fence.end_session(alias, None, session, until=time.monotonic() + 10)


def _stored(key: uuid.UUID) -> bool:
    alias = Entity(id=key).shard
    with connections.create_connection(alias).cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM entities WHERE id = %s", [key.bytes])
        return bool(cursor.fetchone()[0])


def test_a_lost_index_writer_session_leaves_the_callers_transaction_on_that_shard_whole():
    """The issue's trigger: the thread's index writer to B is killed while the caller holds
    ``atomic(using=B)`` with a write in it; then a write on A adds an index row that lives on
    B, meets the dead index writer, and runs again on a fresh one. The caller's block must
    commit its write on B (its own session was never lost), not end with nothing committed."""
    a, b = shards.shard_aliases()
    Entity.objects.create(id=id_on(a), link=_link_on(b))  # the index writer to B is open
    writer = shards.index_connection(b)
    session = int(writer.connection.thread_id())
    mine = id_on(b)
    other = id_on(a)
    with transaction.atomic(using=b):
        Entity.objects.create(id=mine, title="the caller's")
        _kill(b, session)
        Entity.objects.create(id=other, link=_link_on(b))  # retried after the lost writer
    assert _stored(other)
    assert _stored(mine), "the caller's transaction on B ended without committing its write"
    assert Entity.objects.get(id=mine)["title"] == "the caller's"


def test_a_callers_own_session_lost_under_a_store_read_fails_the_block_at_its_end():
    """The caller's own session to B is killed inside its ``atomic(using=B)``; a store read
    on B meets the loss and raises ``ShardUnavailable``, which the caller handles (a view's
    "try again later"). The block cannot commit its earlier write: it must say so at its
    end, as Django does for a lost connection, never end as if it had committed."""
    b = shards.shard_aliases()[1]
    mine = id_on(b)
    with pytest.raises(OperationalError), transaction.atomic(using=b):
        Entity.objects.create(id=mine, title="the caller's")
        _kill(b, int(connections[b].connection.thread_id()))
        with pytest.raises(ShardUnavailable):
            Entity.objects.get(id=id_on(b))
    assert not _stored(mine)
    connections[b].close()


def test_a_callers_own_session_lost_under_a_store_write_fails_the_block_at_its_end():
    """As above, with a store write on B inside the block after the caller's session died:
    the write raises ``ShardUnavailable`` (never retried inside the caller's transaction),
    and a caller that goes on anyway has its block fail at its end."""
    b = shards.shard_aliases()[1]
    mine, later = id_on(b), id_on(b)
    with pytest.raises(OperationalError), transaction.atomic(using=b):
        Entity.objects.create(id=mine, title="the caller's")
        _kill(b, int(connections[b].connection.thread_id()))
        with pytest.raises(ShardUnavailable):
            Entity.objects.create(id=later, title="the store's, in the caller's block")
    assert not _stored(mine) and not _stored(later)
    connections[b].close()


def test_a_callers_session_lost_in_the_middle_of_a_store_write_fails_the_block_at_its_end():
    """The caller's session dies while a store write inside its block waits on a row lock
    (after the write's savepoint): Django cannot roll the savepoint back and marks the block
    for rollback, which it would end without a word. The write raises ``ShardUnavailable``;
    a caller that goes on anyway has its block fail at its end all the same."""
    import threading

    from tests.core.test_callers_block_review_mariadb import _a_row_held_on_shard_b

    b, mine, locked, holder = _a_row_held_on_shard_b()
    try:
        with pytest.raises(OperationalError), transaction.atomic(using=b):
            Entity.objects.create(id=mine, title="the caller's")
            session = int(connections[b].connection.thread_id())
            killer = threading.Timer(1.0, _kill, [b, session])
            killer.start()
            locked["n"] = 2
            with pytest.raises(ShardUnavailable):
                locked.save()  # waits on the holder's lock until the kill
            killer.join()
    finally:
        holder.close()
        connections[b].close()
    assert not _stored(mine)
    assert Entity.objects.get(id=locked.id)["n"] == 1

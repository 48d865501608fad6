"""A read that loses its connection tries again on fresh ones until it succeeds, within
``MOVE_WAIT`` (issue 37): a move's fence kills every session of the store on the source, and a
connection opened inside that kill window is killed too. A server that refuses connections (it
is down) fails at once, and so does a read inside a transaction (only its caller can repeat it).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError, connections, transaction
from django.test import override_settings

from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.models import Entity
from schemaless_store.sql.server_errors import CR_CONN_HOST_ERROR, CR_SERVER_LOST
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE
from tests.support.conn_age import conn_max_age

pytestmark = [STORE]

LOST = OperationalError(CR_SERVER_LOST, "Lost connection to server during query")
REFUSED = OperationalError(CR_CONN_HOST_ERROR, "Can't connect to server on '127.0.0.1'")


def _failing(failures: list[OperationalError]) -> Callable[..., Any]:
    """``shards._fetch_all`` that raises ``failures`` in turn, then reads."""
    real = shards._fetch_all
    left = list(failures)

    def fetch(conn: Any, sql: str, params: Any) -> Any:
        if left:
            raise left.pop(0)
        return real(conn, sql, params)

    return fetch


def _stored() -> tuple[uuid.UUID, str]:
    entity = Entity.objects.create(title="kept")
    return entity.id, bucket_map.alias_for(entity.id.bytes)


def _read(entity_id: uuid.UUID, alias: str) -> list[tuple[Any, ...]]:
    return shards.read(alias, "SELECT id FROM entities WHERE id = %s", [entity_id.bytes])


def test_a_read_losing_fresh_connections_again_and_again_succeeds():
    entity_id, alias = _stored()
    before = shards.reads_retried()
    with mock.patch.object(shards, "_fetch_all", _failing([LOST] * 6)):
        rows = _read(entity_id, alias)
    assert [bytes(r[0]) for r in rows] == [entity_id.bytes]
    assert shards.reads_retried() - before == 6


def test_a_refused_connection_after_a_lost_one_fails_at_once():
    entity_id, alias = _stored()
    started = time.monotonic()
    fetch = _failing([LOST, REFUSED, REFUSED])
    with mock.patch.object(shards, "_fetch_all", fetch), pytest.raises(ShardUnavailable) as raised:
        _read(entity_id, alias)
    assert not raised.value.lost
    assert time.monotonic() - started < 0.5


@override_settings(SCHEMALESS={"BUCKETS": 4096, "MOVE_WAIT": 0.4})
def test_a_read_gives_up_after_move_wait():
    entity_id, alias = _stored()
    started = time.monotonic()
    fetch = _failing([LOST] * 10_000)
    with mock.patch.object(shards, "_fetch_all", fetch), pytest.raises(ShardUnavailable) as raised:
        _read(entity_id, alias)
    took = time.monotonic() - started
    assert raised.value.lost
    assert 0.2 <= took <= 1.0, took


def test_a_read_inside_a_transaction_is_not_repeated():
    entity_id, alias = _stored()
    fetch = _failing([LOST])
    with (
        mock.patch.object(shards, "_fetch_all", fetch),
        pytest.raises(ShardUnavailable),
        transaction.atomic(using=alias),
    ):
        _read(entity_id, alias)


# --- on MariaDB, connections really killed ------------------------------------------------------


def _kill(alias: str, session: int) -> None:
    killer = connections.create_connection(alias)
    try:
        with killer.cursor() as cursor:
            cursor.execute("KILL CONNECTION %s", [session])
    finally:
        killer.close()


@pytest.mark.mariadb_only
def test_a_killed_persistent_connection_then_fresh_ones_killed_in_the_kill_window():
    """The 500 of issue 37: a read's persistent connection is killed by the fence, and its
    retry's new connection is killed too, as it opens inside the kill window; then one more.
    Each kill is real (``KILL CONNECTION`` from another session)."""
    entity_id, alias = _stored()
    conn = connections[alias]
    conn.ensure_connection()
    real = shards._fetch_all
    kills: list[int] = []

    def fetch(wrapper: Any, sql: str, params: Any) -> Any:
        if len(kills) < 3:
            wrapper.ensure_connection()  # the persistent one, then each fresh one as it opens
            session = wrapper.connection.thread_id()
            _kill(alias, session)
            kills.append(session)
        return real(wrapper, sql, params)

    with mock.patch.object(shards, "_fetch_all", fetch):
        rows = _read(entity_id, alias)
    assert [bytes(r[0]) for r in rows] == [entity_id.bytes]
    assert len(set(kills)) == 3  # three different sessions were killed
    assert Entity.objects.get(id=entity_id)["title"] == "kept"


@pytest.mark.mariadb_only
def test_scatter_threads_idle_sessions_ended_by_a_fence_do_not_fail_a_query():
    """With ``CONN_MAX_AGE=60`` the scatter threads keep their connections between queries
    (tests/serving/test_scatter_sessions.py); a fence ends them (``end_other_connections``, the
    fence's own kill on each shard), and the next query that scatters reads on fresh ones."""
    with conn_max_age(60):
        _scatter_threads_sessions_ended()


def _scatter_threads_sessions_ended() -> None:
    from schemaless_store.guards import fence
    from schemaless_store.query.pool import scatter_pool

    made = Entity.objects.bulk_put([{"n": n} for n in range(80)])  # over PARALLEL_FETCH_MIN
    assert {bucket_map.alias_for(e.id.bytes) for e in made} == set(shards.shard_aliases())

    def query() -> list[uuid.UUID]:
        return sorted(Entity.objects.get_many([e.id for e in made]))

    assert query() == sorted(e.id for e in made)
    # The scatter threads hold sessions now.
    assert scatter_pool()._threads
    before = shards.reads_retried()
    killed = sum(fence.end_other_connections(alias) for alias in shards.shard_aliases())
    assert killed >= 1
    assert query() == sorted(e.id for e in made)
    assert shards.reads_retried() > before

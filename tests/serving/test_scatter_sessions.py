"""The scatter threads' connections honour ``CONN_MAX_AGE`` (issue 37): no request ends on those
threads, so Django never closed their connections, and each kept idle sessions of its own
whatever the setting said (11-36 per server under load), which a move's fence then ended.
After each piece of work a thread now does what ``request_finished`` does. Counted on real
MariaDB servers, in ``information_schema.PROCESSLIST``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from schemaless_store.models import Entity
from schemaless_store.query.pool import scatter, scatter_pool
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE
from tests.support.conn_age import conn_max_age

pytestmark = [STORE, pytest.mark.mariadb_only]


def _sessions(alias: str) -> set[int]:
    """The store user's sessions on ``alias``'s database, but the one that asks."""
    settings = connections[alias].settings_dict
    asker = connections.create_connection(alias)
    try:
        with asker.cursor() as cursor:
            cursor.execute(
                "SELECT ID FROM information_schema.PROCESSLIST "
                "WHERE USER = %s AND DB = %s AND ID <> CONNECTION_ID()",
                [settings["USER"], settings["NAME"]],
            )
            return {int(row[0]) for row in cursor.fetchall()}
    finally:
        asker.close()


def _all_sessions() -> dict[str, set[int]]:
    return {alias: _sessions(alias) for alias in shards.shard_aliases()}


@pytest.fixture
def max_age(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``CONN_MAX_AGE`` of every alias: the test's parameter, for the scatter threads'."""
    with conn_max_age(request.param):
        yield request.param


def _stored() -> list[uuid.UUID]:
    made = Entity.objects.bulk_put(
        [{"n": n, "user_id": f"u{n % 7}"} for n in range(80)]  # over PARALLEL_FETCH_MIN
    )
    assert {bucket_map.alias_for(e.id.bytes) for e in made} == set(shards.shard_aliases())
    return [e.id for e in made]


def _scatter_queries(ids: list[uuid.UUID]) -> None:
    assert sorted(Entity.objects.get_many(ids)) == sorted(ids)  # a scatter fetch
    assert len(list(Entity.objects.filter_index(user_id__gte=""))) == len(ids)  # a scatter scan


def _thread_sessions() -> list[int]:
    """A scatter over the shards whose work notes each thread's session on its shard."""
    aliases = list(shards.shard_aliases()) * 3

    def work(alias: str) -> int:
        return int(shards.read(alias, "SELECT CONNECTION_ID()", [])[0][0])

    return scatter(work, aliases)[1:]  # the first item ran in this thread


@pytest.mark.parametrize("max_age", [0], indirect=True)
def test_with_conn_max_age_0_scatter_threads_leave_no_session(max_age: int):
    ids = _stored()
    for alias in shards.shard_aliases():
        connections[alias].ensure_connection()  # this thread's own: there before and after
    before = _all_sessions()
    for _ in range(3):
        _scatter_queries(ids)
    on_threads = _thread_sessions()
    assert scatter_pool()._threads  # the threads did run
    assert on_threads
    after = _all_sessions()
    assert after == before, f"sessions left over: { {a: after[a] - before[a] for a in after} }"
    assert not set(on_threads) & set().union(*after.values())


@pytest.mark.parametrize("max_age", [60], indirect=True)
def test_with_conn_max_age_60_a_thread_keeps_its_session_between_pieces_of_work(max_age: int):
    first = set(_thread_sessions())
    _thread_sessions()
    assert first <= set().union(*_all_sessions().values())  # kept, as Django keeps its own


@pytest.mark.parametrize("max_age", [1], indirect=True)
def test_an_idle_thread_closes_its_sessions_once_conn_max_age_has_passed(max_age: int):
    kept = set(_thread_sessions())
    assert kept <= set().union(*_all_sessions().values())  # younger than 1 s: kept
    deadline = time.monotonic() + 5  # 1 s, and time for a loaded machine
    while kept & set().union(*_all_sessions().values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not kept & set().union(*_all_sessions().values())  # no more work came: closed
    assert _thread_sessions()  # and the threads read on fresh ones

"""The server kills a writer's connection in the middle of a put or a ``bulk_put`` batch.

For a single put (an update and a new entity) and for ``bulk_put`` (explicit ids across both
shards, and entities whose ids the store generated), the statements (and commits) the operation
sends are counted at the driver; then, for every statement number in turn (a seeded sample of
25 for the longer ``bulk_put`` calls), the store is reset
and the operation runs again, and just before that statement another connection runs
``KILL CONNECTION`` on the connection about to send it (Django's or an index writer's). Then:

- every kill is absorbed: the store runs the write again on a fresh connection, as after a
  failover or a move's fence (docs/design.md#the-fence), so the call returns, and a commit
  whose answer was lost is not written twice (a create finds its own row);
- nothing acknowledged is lost: entities the operation does not touch are unchanged, and each
  touched entity is wholly new;
- queries obey I1 and I2 at once, before any retry or cleaner pass;
- retrying the very same call succeeds and leaves exactly one copy of each entity (no
  duplicate from a batch that half committed), and one cleaner pass makes the indexes exact.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import MySQLdb
import MySQLdb.connections
import pytest
from django.db import connections

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import EntityExists, ShardUnavailable
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values import entity_ids
from tests.support import STORE
from tests.support.crashes import BEFORE, A, B, reset_store
from tests.support.invariants import (
    committed_entities,
    conditions_for,
    false_negatives,
    false_positives,
    inexact,
)
from tests.support.reliability_report import recording

pytestmark = [STORE, pytest.mark.slow, pytest.mark.reliability, pytest.mark.mariadb_only]

D, E, F = (uuid.UUID(int=n) for n in (0xD, 0xE, 0x1F))
MAX_POINTS = 25  # kill points per operation (all of them when there are fewer statements)
NEW_A = {
    "user_id": "u2",
    "link": "https://a2",
    "published": 9,
    "tags": ["y", "w"],
    "username": "al",
}
NEW_D = {"user_id": "u3", "link": "https://d", "published": 4, "tags": ["y", "w"], "username": "di"}
NEW_B = {"user_id": "u1", "link": "https://b2", "published": 5, "tags": ["z"]}
NEW_E = {"user_id": "u4", "link": "https://e", "published": 6, "tags": ["x"], "username": "ed"}
NEW_F = {"user_id": "u2", "link": "https://f", "published": 7}
GENERATED = [
    {"user_id": "g1", "link": "https://g1", "tags": ["g"]},
    {"user_id": "g2", "link": "https://g2", "published": 1},
    {"user_id": "g1", "link": "https://g3", "tags": ["h", "g"]},
]


class Killer:
    """Counts the queries and commits sent through the driver; before number ``at``, has the
    server kill the connection about to send it (``KILL CONNECTION`` from another connection)."""

    def __init__(self, at: int | None = None) -> None:
        self.at = at
        self.count = 0
        self.killed = False
        self.commits: list[int] = []  # the numbers of the commits and the batches that commit
        self._admins: dict[int, Any] = {}

    def _admin(self, port: int) -> Any:
        if port not in self._admins:
            self._admins[port] = MySQLdb.connect(host="127.0.0.1", port=port, user="root")
        return self._admins[port]

    def kill(self, victim: Any) -> None:
        thread_id = victim.thread_id()
        admin = self._admin(victim.port)
        admin.query(f"KILL CONNECTION {int(thread_id)}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the kill is asynchronous: wait until it is done
            cursor = admin.cursor()
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s", [thread_id]
            )
            (alive,) = cursor.fetchone()
            cursor.close()
            if not alive:
                return
            time.sleep(0.005)
        raise AssertionError(f"connection {thread_id} survived KILL CONNECTION")

    def _before(self, connection: Any, sent: Any = None) -> None:
        self.count += 1
        if sent is None or b"COMMIT" in bytes(sent):  # a commit, or a batch ending in one
            self.commits.append(self.count)
        if self.count == self.at:
            self.killed = True
            self.kill(connection)

    @contextlib.contextmanager
    def armed(self) -> Iterator[Killer]:
        # At Connection.query, which a cursor's execute ends in and which the store's reads
        # and commit batches call without a cursor: every query sent is a kill point (the
        # killer's own admin connections excepted), and so is every COMMIT.
        driver = MySQLdb.connections.Connection
        originals = {(driver, "query"): driver.query, (driver, "commit"): driver.commit}

        def on_connection(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(connection: Any, *args: Any, **kwargs: Any) -> Any:
                if not any(connection is admin for admin in self._admins.values()):
                    self._before(connection, args[0] if args else None)
                return original(connection, *args, **kwargs)

            return wrapper

        driver.query = on_connection(driver.query)  # type: ignore[method-assign]
        driver.commit = on_connection(driver.commit)  # type: ignore[method-assign]
        try:
            yield self
        finally:
            for (owner, name), original in originals.items():
                setattr(owner, name, original)

    def close(self) -> None:
        for admin in self._admins.values():
            admin.close()


# Each operation: (make the call, {id: (old state, new state)} once the call has been made).
Operation = Callable[[], tuple[Callable[[], Any], Callable[[], dict[bytes, tuple[Any, Any]]]]]


def put_update() -> tuple[Callable[[], Any], Callable[[], dict[bytes, tuple[Any, Any]]]]:
    entity = Entity.objects.get(id=A)
    for name in list(entity.body_properties()):
        del entity[name]
    for name, value in NEW_A.items():
        entity[name] = value
    return entity.save, lambda: {A.bytes: (BEFORE[A], NEW_A)}


def put_new() -> tuple[Callable[[], Any], Callable[[], dict[bytes, tuple[Any, Any]]]]:
    entity = Entity(id=D, **NEW_D)
    return entity.save, lambda: {D.bytes: (None, NEW_D)}


def create_new() -> tuple[Callable[[], Any], Callable[[], dict[bytes, tuple[Any, Any]]]]:
    """``create``: insert only. Its first call must succeed even when the answer to its commit
    was lost (the store's retry finds its own row); a call again is refused as a create is."""
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        try:
            Entity.objects.create(id=D, **NEW_D)
        except EntityExists:
            if len(calls) == 1:
                raise

    return call, lambda: {D.bytes: (None, NEW_D)}


def bulk_put() -> tuple[Callable[[], Any], Callable[[], dict[bytes, tuple[Any, Any]]]]:
    items = [{"id": A, **NEW_A}, {"id": D, **NEW_D}, {"id": B, **NEW_B}, {"id": E, **NEW_E}]
    items.append({"id": F, **NEW_F})
    assert {bucket_map.alias_for(i["id"].bytes) for i in items} == set(shards.shard_aliases())

    def expected() -> dict[bytes, tuple[Any, Any]]:
        return {
            i["id"].bytes: (BEFORE.get(i["id"]), {k: v for k, v in i.items() if k != "id"})
            for i in items
        }

    return lambda: Entity.objects.bulk_put(items, batch_size=2), expected


def bulk_put_generated() -> tuple[Callable[[], Any], Callable[[], dict[bytes, tuple[Any, Any]]]]:
    # The store generates the ids (entity_ids.new_id, patched to fixed ones so that every case
    # sends the same statements): two batches on shard_0's side of the ids, one on shard_1's.
    ids: list[uuid.UUID] = []
    for alias in ["shard_0", "shard_1", "shard_0"]:
        n = 0x1000
        while (candidate := uuid.UUID(int=n)) in ids or bucket_map.alias_for(
            candidate.bytes
        ) != alias:
            n += 1
        ids.append(candidate)
    with mock.patch.object(entity_ids, "new_id", side_effect=[i.bytes for i in ids]):
        entities = [Entity(**props) for props in GENERATED]
    assert all(e.has_generated_id for e in entities)
    return (
        lambda: Entity.objects.bulk_put(entities, batch_size=2),
        lambda: {e.id.bytes: (None, props) for e, props in zip(entities, GENERATED, strict=True)},
    )


OPERATIONS: dict[str, Operation] = {
    "put_update": put_update,
    "put_new": put_new,
    "create_new": create_new,
    "bulk_put": bulk_put,
    "bulk_put_generated": bulk_put_generated,
}


def forget_connections() -> None:
    connections.close_all()
    shards.close_index_connections()


def statements_of(operation: Operation) -> tuple[int, list[int]]:
    # Once unarmed first: a connection reads its shard's served buckets once per process and
    # generation, the reads after it only the generation (docs/design.md#the-fence).
    reset_store()
    operation()[0]()
    reset_store()
    call, _expected = operation()
    forget_connections()  # every statement of the call, connects included, is counted
    killer = Killer()
    with killer.armed():
        call()
    return killer.count, killer.commits


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_a_killed_connection_loses_nothing_and_a_retry_is_idempotent(name):
    operation = OPERATIONS[name]
    total, commits = statements_of(operation)
    assert total >= 4 and commits, (total, commits)
    raised = absorbed = 0
    points = list(range(1, total + 1))
    if len(points) > MAX_POINTS:  # keep the test short: a seeded sample, first and last kept,
        # and every commit (a COMMIT alone, or a batch that ends in one) always
        sample = random.Random(name).sample(points[1:-1], MAX_POINTS - 2)
        points = sorted({points[0], *sample, *commits, points[-1]})
    fault = f"server kills the connection mid-{name}, then the call is retried"
    with recording(fault, statements=total) as tally:
        for at in points:
            where = f"{name}, kill before statement {at}"
            reset_store()
            call, expected_of = operation()
            forget_connections()
            killer = Killer(at)
            acknowledged = False
            try:
                with killer.armed():
                    try:
                        call()
                    except ShardUnavailable:
                        raised += 1
                    else:
                        absorbed += 1
                        acknowledged = True
            finally:
                killer.close()
            tally.details.update(raised=raised, absorbed_after_commit=absorbed)
            assert killer.killed
            expected = expected_of()
            forget_connections()
            stored = committed_entities()
            for entity_id, (old, new) in expected.items():
                got = stored.get(entity_id)
                if acknowledged:  # I4: a call that returned has written everything it was given
                    tally.expect(
                        got == new, f"{where}: acknowledged {new!r}, stored {got!r}", "lost"
                    )
                else:
                    tally.expect(
                        got in (old, new), f"{where}: neither old nor new: {got!r}", "lost"
                    )
            for entity_id, props in BEFORE.items():
                if entity_id.bytes not in expected:
                    got = stored.get(entity_id.bytes)
                    tally.expect(got == props, f"{where}: untouched {props!r} is {got!r}", "lost")
            queries, missed = false_negatives()  # I2, before any retry or repair
            tally.wrong_each(f"{where}: {problem}" for problem in missed)
            for _old, new in expected.values():
                for index in registry.valid():
                    queries.extend(conditions_for(index, new or {}))
            tally.wrong_each(f"{where}: {problem}" for problem in false_positives(queries))  # I1

            call()  # the very same call again
            stored = committed_entities()
            for entity_id, (_old, new) in expected.items():
                got = stored.get(entity_id)
                tally.expect(got == new, f"{where}, retried: {new!r} stored as {got!r}", "lost")
            untouched = {i.bytes for i in BEFORE} - set(expected)
            tally.expect(
                len(stored) == len(untouched) + len(expected),
                f"{where}: a retry duplicated an entity ({len(stored)} stored)",
            )
            states = [*BEFORE.values(), *(new for _old, new in expected.values() if new)]
            touched = [i.name for i in registry.valid() if any(i.rows_for(p) for p in states)]
            summary = Cleaner(indexes=touched, once=True).run()
            tally.expect(
                not summary.failed and not summary.problems,
                f"{where}: {summary.describe()}",
                "fail",
            )
            problem = inexact()  # I3
            tally.expect(problem is None, f"{where}: after one cleaner pass, {problem}")
            tally.cases += 1
    # The store's own retry absorbed every kill (with its retries off, each kill raises).
    assert raised == 0, (raised, absorbed)
    assert absorbed == len(points)

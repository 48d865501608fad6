"""A shard's ``mariadbd`` SIGKILLed during writes, then restarted on the same datadir and port.

A writer thread runs a seeded mix of creates, updates, deletes and ``bulk_put`` calls on entities
of both shards and logs each write as acknowledged or failed. The server holding ``shard_1`` is
SIGKILLed while it writes. While it is down, the test checks from another thread that entities on
``shard_0`` can still be read and written, and that anything needing ``shard_1`` (a read by id, a
create, a scatter-gather query, a query pinned to ``shard_1``, a query whose entity lives there)
fails quickly with :class:`ShardUnavailable` naming ``shard_1``. The writer's own failures must
all be that error, too. After the restart: every acknowledged write is what is stored (I4; a
failed write may or may not have happened), queries obey I1 and I2, and one cleaner pass restores
I3.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.models import Entity
from schemaless_store.query.pool import reset_scatter_pool
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values import index_values
from tests.support import STORE, child
from tests.support.buckets import id_on
from tests.support.crashes import touched_indexes
from tests.support.invariants import (
    committed_entities,
    conditions_for,
    false_negatives,
    false_positives,
    inexact,
)
from tests.support.reliability_report import recording

pytestmark = [STORE, pytest.mark.slow, pytest.mark.reliability, pytest.mark.mariadb_only]

DEAD = "shard_1"
BOUND = 5.0  # seconds an operation needing the dead shard may take to fail


class Writer(threading.Thread):
    """Seeded mixed writes until stopped; remembers, per entity, what was acknowledged or failed.

    ``history[id]`` is a list of ``(outcome, state)`` with outcome ``"ack"`` or ``"failed"`` and
    state the properties written (``None`` for a delete).
    """

    def __init__(self, seed: int, ids: list[str], stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.rng = random.Random(seed)
        self.ids = list(ids)
        self.stop = stop
        self.history: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        self.errors: list[BaseException] = []
        self.outcomes: Counter[str] = Counter()

    def _log(self, outcome: str, states: dict[str, Any]) -> None:
        for entity_id, state in states.items():
            self.history[entity_id].append((outcome, state))
        self.outcomes[outcome] += 1

    def _one(self) -> None:
        rng = self.rng
        op = rng.choice(["create", "put", "update", "delete", "bulk_put"])
        if op in ("update", "delete"):
            target = rng.choice(self.ids)
            entity = Entity.objects.get_many([uuid.UUID(target)]).get(uuid.UUID(target))
            if entity is None:
                return
            states: dict[str, Any] = {target: None if op == "delete" else child.mixed_props(rng)}
        elif op == "create":
            states = {uuid.UUID(int=rng.getrandbits(128)).hex: child.mixed_props(rng)}
        elif op == "put":
            states = {rng.choice(self.ids): child.mixed_props(rng)}
        else:
            states = {uuid.UUID(int=rng.getrandbits(128)).hex: child.mixed_props(rng)}
            states.update({i: child.mixed_props(rng) for i in rng.sample(self.ids, 2)})
        try:
            if op == "delete":
                entity.delete()
            elif op == "update":
                for name in list(entity.body_properties()):
                    del entity[name]
                for name, value in states[target].items():
                    entity[name] = value
                entity.save()
            elif op == "create":
                [(new_id, props)] = states.items()
                Entity.objects.create(id=uuid.UUID(new_id), **props)
            else:
                Entity.objects.bulk_put([{"id": uuid.UUID(i), **p} for i, p in states.items()])
        except BaseException:
            self._log("failed", states)
            raise
        self._log("ack", states)
        self.ids.extend(i for i in states if i not in self.ids)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    self._one()
                except Exception as exc:
                    self.errors.append(exc)
                time.sleep(0.01)  # fewer entities: the checks after query every one of them
        finally:
            connections.close_all()
            shards.close_index_connections()


def link_on(alias: str, prefix: str) -> str:
    """A link whose index row lives on ``alias``."""
    n = 0
    while (
        bucket_map.alias_for(index_values.encode_key(index_values.encode_key(f"{prefix}{n}")))
        != alias
    ):
        n += 1
    return f"{prefix}{n}"


def timed_failure(action: Any) -> ShardUnavailable:
    """Run ``action``; it must raise :class:`ShardUnavailable` naming the dead shard, quickly."""
    started = time.monotonic()
    with pytest.raises(ShardUnavailable) as info:
        action()
    elapsed = time.monotonic() - started
    assert elapsed < BOUND, f"took {elapsed:.1f}s to fail"
    assert info.value.alias == DEAD and DEAD in str(info.value), info.value
    return info.value


def forget_connections() -> None:
    connections.close_all()
    shards.close_index_connections()
    reset_scatter_pool()


def checks_while_down() -> int:
    """What must (and must not) work while ``shard_1``'s server is dead; returns checks made."""
    alive_link = link_on("shard_0", "https://alive/")
    alive = Entity.objects.create(id=id_on("shard_0"), link=alive_link, title="alive")
    assert Entity.objects.get(id=alive.id)["title"] == "alive"
    alive["title"] = "still alive"
    alive.save()
    assert [e.id for e in Entity.objects.filter_index(link=alive_link)] == [alive.id]
    assert Entity.objects.get(id=alive.id)["title"] == "still alive"
    failures = [
        lambda: Entity.objects.get(id=id_on(DEAD)),
        lambda: Entity.objects.create(id=id_on(DEAD), title="nowhere"),
        # An entity on the live shard whose index row belongs on the dead one.
        lambda: Entity.objects.create(id=id_on("shard_0"), link=link_on(DEAD, "https://x/")),
        lambda: list(Entity.objects.filter_index(user_id__gte="")),  # scatter-gather
        lambda: list(
            Entity.objects.filter_index(link=link_on(DEAD, "https://x/"))
        ),  # pinned to the dead one
    ]
    for action in failures:
        timed_failure(action)
    return len(failures) + 4


def test_a_shard_server_killed_during_writes_loses_nothing_acknowledged():
    server = settings.MARIADB_SERVERS[1]
    assert int(connections[DEAD].settings_dict["PORT"]) == server.port  # shard_1 alone on it
    assert all(
        int(connections[a].settings_dict["PORT"]) != server.port for a in ("default", "shard_0")
    )
    rng = random.Random(1)
    start = [id_on(alias).hex for alias in ("shard_0", "shard_1") for _ in range(6)]
    initial = {i: child.mixed_props(rng) for i in start}
    Entity.objects.bulk_put([{"id": uuid.UUID(i), **p} for i, p in initial.items()])
    # An entity on shard_1 found through an index row on shard_0: fetching it needs shard_1.
    remote = Entity.objects.create(id=id_on(DEAD), link=link_on("shard_0", "https://remote/"))

    stop = threading.Event()
    writer = Writer(seed=2, ids=start, stop=stop)
    with recording("SIGKILL of a shard's mariadbd during writes, then restart") as tally:
        writer.start()
        try:
            time.sleep(1.0)
            acked_before_kill = writer.outcomes["ack"]
            server.kill()
            time.sleep(0.3)
            checks = checks_while_down()
            timed_failure(lambda: list(Entity.objects.filter_index(link=remote["link"])))
            tally.details.update(checks_while_down=checks + 1)
            # The writer reports a failure once one of its writes meets the dead shard; a write
            # that lost its commit answer first asks for its receipt (RECEIPT_WAIT): wait for it.
            deadline = time.monotonic() + 15
            while not writer.outcomes["failed"] and time.monotonic() < deadline:
                time.sleep(0.1)
            failed_while_down = writer.outcomes["failed"]
            server.start()
            forget_connections()
            time.sleep(1.5)
        finally:
            stop.set()
            writer.join(timeout=60)
            if server.process is None:
                server.start()
            forget_connections()
            tally.details.update(
                acknowledged_writes=writer.outcomes["ack"], failed_writes=writer.outcomes["failed"]
            )
        assert not writer.is_alive()
        tally.cases = 1
        assert acked_before_kill > 0 and failed_while_down > 0, writer.outcomes
        assert writer.outcomes["ack"] > acked_before_kill, "no write succeeded after the restart"
        for error in writer.errors:
            if not (isinstance(error, ShardUnavailable) and error.alias == DEAD):
                tally.fail(f"the writer saw {error!r}")

        # I4: per entity, the stored state is the last acknowledged one, or one a later failed
        # write may have left (a failure does not say whether the commit happened).
        stored = {e.hex(): p for e, p in committed_entities().items()}
        for entity_id, events in writer.history.items():
            allowed = [initial.get(entity_id)]
            for outcome, state in events:
                allowed = [state] if outcome == "ack" else [*allowed, state]
            tally.expect(
                stored.get(entity_id) in allowed,
                f"{entity_id} is {stored.get(entity_id)!r}: neither acknowledged nor a failed "
                f"write's state ({allowed!r})",
                "lost",
            )
        got = Entity.objects.get(id=remote.id)["link"]  # the store reconnects
        tally.expect(got == remote["link"], f"{remote.id} has link {got!r}", "lost")

        queries, missed = false_negatives()  # I2
        tally.wrong_each(missed)
        for events in writer.history.values():
            for _outcome, state in events:
                for index in registry.valid():
                    queries.extend(conditions_for(index, state or {}))
        unique = {repr(sorted(q.items())): q for q in queries}
        tally.wrong_each(false_positives(unique.values()))  # I1
        touched = [*touched_indexes()]
        summary = Cleaner(indexes=touched, once=True).run()
        tally.expect(not summary.failed and not summary.problems, summary.describe(), "fail")
        problem = inexact()  # I3 after one pass
        tally.expect(problem is None, f"after one cleaner pass, {problem}")

"""Fault injection on the write path, and concurrent writers (docs/design.md#write-protocol).

A writer *process* is SIGKILLed just before each SQL statement (and each commit) of a put, an
update and a delete in turn (counted by patching Django's ``CursorWrapper`` and ``commit()`` in
that process; see ``tests/support/child.py``). After each kill, queries must obey I1 (no
non-matching entity returned) and I2 (every committed entity found by every ready index covering
it), the entity must be wholly old or wholly new, and one cleaner pass must restore I3 (exact
indexes).
"""

from __future__ import annotations

import random
import threading
import uuid

import pytest
from django.db import connections

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.crashes import BEFORE, A, B, D, reset_store
from tests.support.invariants import (
    committed_entities,
    conditions_for,
    false_negatives,
    false_positives,
    inexact,
)
from tests.support.reliability_report import Tally, recording

pytestmark = [STORE, pytest.mark.slow]

# A new entity without a unique property (a unique claim takes Django's save() path).
NEW = {"user_id": "u3", "link": "https://d", "published": 4, "tags": ["y", "w"]}
# Every operation touches every index: rows to add on some shards, rows to remove on others.
OPERATIONS = {
    "put": (
        {"op": "create", "id": D.hex},
        D,
        {
            "user_id": "u3",
            "link": "https://d",
            "published": 4,
            "tags": ["y", "w"],
            "username": "di",
        },
    ),
    "update": (
        {"op": "update", "id": A.hex},
        A,
        {
            "user_id": "u2",
            "link": "https://a2",
            "published": 9,
            "tags": ["y", "w"],
            "username": "al",
        },
    ),
    "delete": ({"op": "delete", "id": B.hex}, B, None),
    # New entities whose ids the store generates (Entity.objects.create(**props) and bulk_put
    # of dicts): no locking read, and on MariaDB a create skips Django's save().
    "put_generated": ({"op": "create_generated", "id": D.hex}, D, NEW),
    "bulk_put_generated": ({"op": "bulk_put_generated", "items": [[D.hex, NEW]]}, D, NEW),
}


def run_cleaner_pass(tally: Tally, where: str = "") -> None:
    # The indexes these writes can touch: an index none of the entities (before or after any
    # operation) implies a row in is never written (inexact() still checks every index).
    states = [*BEFORE.values(), *(props for _, _, props in OPERATIONS.values() if props)]
    touched = [i.name for i in registry.valid() if any(i.rows_for(p) for p in states)]
    summary = Cleaner(indexes=touched, once=True).run()
    tally.expect(
        not summary.failed and not summary.problems, f"{where}{summary.describe()}", "fail"
    )
    problem = inexact()  # I3 after one pass
    tally.expect(problem is None, f"{where}after one cleaner pass, {problem}")


def check_after(
    tally: Tally,
    where: str,
    target: uuid.UUID,
    old: dict | None,
    new: dict | None,
    acknowledged: bool,
) -> None:
    stored = committed_entities().get(target.bytes)
    if acknowledged:  # I4: an acknowledged write is what is stored
        tally.expect(stored == new, f"{where}: acknowledged {new!r}, stored {stored!r}", "lost")
    else:
        tally.expect(stored in (old, new), f"{where}: neither old nor new: {stored!r}", "lost")
    queries, missed = false_negatives()  # I2
    tally.wrong_each(f"{where}: {problem}" for problem in missed)
    for props in (old, new):
        for index in registry.valid():
            queries.extend(conditions_for(index, props or {}))
    # I1, old values included (stale rows must not show)
    tally.wrong_each(f"{where}: {problem}" for problem in false_positives(queries))


@pytest.mark.reliability
@pytest.mark.parametrize("name", list(OPERATIONS))
def test_a_writer_killed_before_any_statement_or_commit_keeps_the_invariants(writer, name):
    request, target, new = OPERATIONS[name]
    old = BEFORE.get(target)
    request = {**request, "props": new}

    with recording(f"SIGKILL before each statement and commit of one {name}") as tally:
        reset_store()
        finished = writer.run(request)
        assert finished["ended"] == "exit 0", finished
        statements = finished["statements"]
        print(f"{name}: {statements} kill points")
        assert statements >= 3  # lock or insert, entity write, index rows at least
        check_after(tally, f"{name} not killed", target, old, new, acknowledged=True)
        problem = inexact()  # a write that completed leaves exact indexes without the cleaner
        tally.expect(problem is None, f"{name} not killed: {problem}")

        for kill_at in range(1, statements + 1):
            where = f"{name} killed before statement {kill_at}"
            reset_store()
            killed = writer.run({**request, "kill_at": kill_at})
            assert killed["ended"] == "signal 9", (kill_at, killed)
            check_after(tally, where, target, old, new, acknowledged=False)
            run_cleaner_pass(tally, f"{where}: ")
            check_after(tally, f"{where}, cleaned", target, old, new, acknowledged=False)
            tally.cases += 1


# --- concurrent writers ------------------------------------------------------------------------

LINKS = [f"https://example.com/{n}" for n in range(4)]
TAGS = ["red", "green", "blue", "black"]


@pytest.mark.reliability
def test_concurrent_writers_on_the_same_entities_never_show_a_non_matching_one():
    rng = random.Random(11)
    ids = [
        e.id
        for e in Entity.objects.bulk_put(
            {"link": rng.choice(LINKS), "tags": rng.sample(TAGS, 2), "n": 0} for _ in range(12)
        )
    ]
    stop = threading.Event()
    problems: list[str] = []
    queries = [0]

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(30):
                entity = Entity.objects.get(id=rng.choice(ids))
                entity["link"] = rng.choice(LINKS)
                entity["tags"] = rng.sample(TAGS, rng.randint(0, 3))
                entity.save()
        except Exception as exc:
            problems.append(f"writer: {exc!r}")
        finally:
            shards.close_index_connections()
            connections.close_all()

    def reader() -> None:
        try:
            while not stop.is_set():
                for link in LINKS:
                    for entity in Entity.objects.filter_index(link=link):
                        if entity["link"] != link:
                            problems.append(f"link={link} returned {entity.properties}")
                for tag in TAGS:
                    for entity in Entity.objects.filter_index(tags=tag):
                        if tag not in entity["tags"]:
                            problems.append(f"tags={tag} returned {entity.properties}")
                queries[0] += 1
        except Exception as exc:
            problems.append(f"reader: {exc!r}")
        finally:
            connections.close_all()

    with recording("4 writer threads and a reader on the same entities (query rounds)") as tally:
        writers = [threading.Thread(target=writer, args=(seed,)) for seed in range(4)]
        watcher = threading.Thread(target=reader)
        watcher.start()
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()
        stop.set()
        watcher.join()
        tally.cases = queries[0]
        for problem in problems:
            if "returned" in problem:
                tally.wrong(problem)
            else:
                tally.fail(problem)
        _queries, missed = false_negatives()
        tally.wrong_each(missed)
        run_cleaner_pass(tally)
    assert queries[0] > 0

"""Seeded random-point SIGKILLs of a mixed writer (create/update/delete/bulk_put), issue 8.

Each case resets the store, forks a writer (``tests/support/child.py``, op ``mixed``) that runs a
seeded sequence of writes and is SIGKILLed before a seeded random statement (or commit). The
writer logs each write as begun and as acknowledged to a file before the kill. After each kill:
every acknowledged write is what is stored (I4; only the one write in flight may be either old or
new), queries obey I1 and I2, and one cleaner pass restores I3.

``SCHEMALESS_RELIABILITY_KILLS`` sets the number of kills (default 20 in the normal suite; the
report in docs/reliability.md is produced with 200).
"""

from __future__ import annotations

import json
import os
import random
import uuid
from typing import Any

import pytest

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from tests.support import STORE, child, crashes
from tests.support.invariants import (
    committed_entities,
    conditions_for,
    false_negatives,
    false_positives,
    inexact,
)
from tests.support.reliability_report import recording

pytestmark = [STORE, pytest.mark.slow, pytest.mark.reliability]

KILLS = int(os.environ.get("SCHEMALESS_RELIABILITY_KILLS", "20"))
WRITES = 6  # writes per case; the kill point is drawn over about this many writes' statements
START = [uuid.UUID(int=0x100 + n).hex for n in range(4)]


def reset_store(rng: random.Random) -> dict[str, dict[str, Any] | None]:
    # Empty tables, then three unrelated entities (crashes.BEFORE).
    crashes.reset_store()
    states = {i: child.mixed_props(rng) for i in START}
    Entity.objects.bulk_put([{"id": uuid.UUID(i), **p} for i, p in states.items()])
    return dict(states)


def test_random_sigkills_of_a_mixed_writer_lose_nothing_acknowledged(writer, tmp_path):
    rng = random.Random(8)
    touched = crashes.touched_indexes()
    killed_count = acked_writes = 0
    with recording("SIGKILL of a mixed writer at a random statement (seeded)") as tally:
        for case in range(KILLS):
            seed = rng.randrange(2**32)
            kill_at = rng.randint(1, WRITES * 8)
            where = f"case {case} (seed {seed}, kill at {kill_at})"
            expected = reset_store(random.Random(seed))
            acks = tmp_path / f"acks-{case}.jsonl"
            answer = writer.run(
                {
                    "op": "mixed",
                    "seed": seed,
                    "ids": START,
                    "writes": WRITES,
                    "acks": str(acks),
                    "kill_at": kill_at,
                }
            )
            assert answer["ended"] in ("signal 9", "exit 0"), answer
            killed_count += answer["ended"] == "signal 9"
            tally.details.update(killed=killed_count)
            in_flight: dict[str, Any] = {}
            for line in acks.read_text().splitlines() if acks.exists() else []:
                entry = json.loads(line)
                if "begin" in entry:
                    in_flight = entry["begin"]
                else:
                    expected.update(entry["ack"])
                    acked_writes += 1
                    in_flight = {}
            tally.details.update(acknowledged_writes=acked_writes)
            stored = {e.hex(): p for e, p in committed_entities().items()}
            for entity_id in {**expected, **in_flight}:
                allowed = [expected.get(entity_id)]
                if entity_id in in_flight:
                    allowed.append(in_flight[entity_id])
                tally.expect(
                    stored.get(entity_id) in allowed,
                    f"{where}: {entity_id} is {stored.get(entity_id)!r}, not one of {allowed!r}",
                    "lost",
                )  # I4

            queries, missed = false_negatives()  # I2
            tally.wrong_each(f"{where}: {problem}" for problem in missed)
            for props in [*expected.values(), *in_flight.values()]:
                for index in registry.valid():
                    queries.extend(conditions_for(index, props or {}))
            tally.wrong_each(f"{where}: {problem}" for problem in false_positives(queries))  # I1
            summary = Cleaner(indexes=touched, once=True).run()
            tally.expect(
                not summary.failed and not summary.problems,
                f"{where}: {summary.describe()}",
                "fail",
            )
            problem = inexact()  # I3 after one pass
            tally.expect(problem is None, f"{where}: after one cleaner pass, {problem}")
            tally.cases += 1
    assert killed_count >= KILLS // 2  # the kill points really land inside the writes

"""Concurrent writers and readers on an overlapping set of entities (issue 8, "Faults").

Eight writer threads in this process and two writer processes (``tests/support/child.py``, mode
``mixedloop``) run seeded mixes of creates, updates, deletes and ``bulk_put`` calls on the same
small set of ids for a bounded time, changing indexed properties all the time, while reader
threads query ``filter_index`` on those properties. Then:

- no reader ever got an entity that does not match its query (I1);
- no writer saw an error: deadlocks and lock wait timeouts are retried inside the store (a
  create that lost a race raising :class:`EntityExists` is the one normal refusal);
- once writes stop, every entity is found by every ready index covering it (I2), and one
  cleaner pass makes the index tables exact (I3).

``SCHEMALESS_CONCURRENCY_SECONDS`` sets how long the writers run (default 8).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import uuid
from collections import Counter
from typing import Any

import pytest
from django.db import connections

from schemaless_store.cleaner import Cleaner
from schemaless_store.models import Entity
from schemaless_store.topology import retries, shards
from tests.support import STORE, child, crash_writer
from tests.support.crashes import touched_indexes
from tests.support.invariants import false_negatives, inexact, matches
from tests.support.reliability_report import recording

pytestmark = [STORE, pytest.mark.slow, pytest.mark.reliability, pytest.mark.mariadb_only]

SECONDS = float(os.environ.get("SCHEMALESS_CONCURRENCY_SECONDS", "8"))
THREADS = 8
PROCESSES = 2
READERS = 2
IDS = [uuid.UUID(int=0x2000 + n).hex for n in range(24)]


def queries() -> list[dict[str, Any]]:
    return [
        *({"link": link} for link in crash_writer.MIXED_LINKS),
        *({"tags": tag} for tag in crash_writer.MIXED_TAGS),
        {"user_id": "u1"},
        {"user_id": "u2"},
    ]


class Reader(threading.Thread):
    def __init__(self, seed: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.rng = random.Random(seed)
        self.stop = stop
        self.queries = self.results = 0
        self.wrong: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                conditions = self.rng.choice(queries())
                try:
                    for entity in Entity.objects.filter_index(**conditions):
                        self.results += 1
                        if not matches(entity, conditions):
                            self.wrong.append((conditions, entity.properties))
                except Exception as exc:
                    self.errors.append(repr(exc))
                self.queries += 1
        finally:
            connections.close_all()
            shards.close_index_connections()


def test_concurrent_mixed_writers_and_readers_see_no_errors_and_converge():
    rng = random.Random(8)
    Entity.objects.bulk_put([{"id": uuid.UUID(i), **child.mixed_props(rng)} for i in IDS])
    fault = (
        f"{THREADS} writer threads + {PROCESSES} writer processes on {len(IDS)} shared ids, "
        f"{READERS} readers, {SECONDS:g} s"
    )
    with recording(fault) as tally:
        processes = [
            child.spawn("mixedloop", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(PROCESSES)
        ]
        for number, process in enumerate(processes):
            assert process.stdin is not None
            request = {"seed": 100 + number, "ids": IDS, "seconds": SECONDS}
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.close()
        retries_before = retries.retries_made()
        results: list[dict[str, Any]] = [{} for _ in range(THREADS)]

        def write(number: int) -> None:
            results[number] = child.mixed_loop(number, IDS, SECONDS)

        stop = threading.Event()
        readers = [Reader(number, stop) for number in range(READERS)]
        writers = [threading.Thread(target=write, args=(n,), daemon=True) for n in range(THREADS)]
        for thread in [*readers, *writers]:
            thread.start()
        for thread in writers:
            thread.join(timeout=SECONDS + 60)
        stop.set()
        for thread in readers:
            thread.join(timeout=60)
        answers = []
        for process in processes:
            assert process.stdout is not None
            out = process.stdout.read()
            assert process.wait(timeout=120) == 0, out
            answers.append(json.loads(out.strip().splitlines()[-1]))
        assert not any(t.is_alive() for t in [*writers, *readers])
        thread_retries = retries.retries_made() - retries_before

        everything = [*results, *answers]
        operations: Counter[str] = Counter()
        for answer in everything:
            operations.update(answer["counts"])
        tally.cases = sum(operations.values())
        error_count = sum(answer["error_count"] for answer in everything)
        tally.details.update(
            operations=dict(operations),
            retries=thread_retries + sum(answer["retries"] for answer in answers),
            surfaced_errors=error_count,
            queries=sum(r.queries for r in readers),
            results_checked=sum(r.results for r in readers),
        )
        for answer in everything:  # each writer lists its first 10 errors
            shown = answer["errors"] + [None] * (answer["error_count"] - len(answer["errors"]))
            for error in shown:
                tally.fail(f"a writer saw {error or 'one more error'}")
        for error in [e for reader in readers for e in reader.errors]:
            tally.fail(f"a reader saw {error}")
        for conditions, properties in [w for reader in readers for w in reader.wrong]:
            tally.wrong(f"{conditions} returned non-matching {properties}")  # I1 while writing

        _queries, missed = false_negatives()  # I2 once writes stopped
        tally.wrong_each(missed)
        summary = Cleaner(indexes=touched_indexes(), once=True).run()
        tally.expect(not summary.failed and not summary.problems, summary.describe(), "fail")
        problem = inexact()  # I3 after one pass
        tally.expect(problem is None, f"after one cleaner pass, {problem}")
    assert tally.cases >= 100, operations  # the writers really ran
    assert sum(r.queries for r in readers) >= 20

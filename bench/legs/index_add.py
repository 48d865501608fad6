"""Leg 4: adding an index to a loaded, live store while a writer keeps committing single puts.

Baselines, on the peer's JSON table of the same rows, with a writer inserting into that table:
``ALTER TABLE ... ADD INDEX`` on the ``link`` virtual column with the default algorithm, with
``ALGORITHM=INPLACE, LOCK=NONE`` and with ``ALGORITHM=COPY``; and a server-side chunked copy
(``INSERT ... SELECT`` in 10k-row primary-key ranges) into an index table.

Ours: declare ``index_link``, then backfill it with the Cleaner while a writer thread runs
``Entity.objects.create``. Until ``schemaless_store.cleaner`` exists, that half is reported as
pending, with no numbers.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .. import peer, raw
from ..context import Bench
from ..data import writer_properties
from ..stats import percentile

COPY_CHUNK = 10_000
LINK_INDEX = "json_entities_link"
ALTERS = {
    "alter_default": "",
    "alter_inplace_lock_none": ", ALGORITHM=INPLACE, LOCK=NONE",
    "alter_copy": ", ALGORITHM=COPY",
}


class Writer(threading.Thread):
    """Commits one write after another and records (start, latency) of each."""

    def __init__(self, make_op: Callable[[], Callable[[int], None]]) -> None:
        super().__init__(daemon=True)
        self.make_op = make_op  # called in the thread: connections belong to their thread
        self.samples: list[tuple[float, float]] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            op = self.make_op()
            clock = time.perf_counter
            for n in itertools.count():
                if self.stopping.is_set():
                    return
                start = clock()
                op(n)
                self.samples.append((start, clock() - start))
        except BaseException as exc:  # reported by stop(), not lost in a thread
            self.error = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=600)
        if self.error is not None:
            raise RuntimeError(f"the writer failed: {self.error!r}") from self.error

    def window(self, start: float, end: float) -> dict[str, float]:
        lat = [latency for at, latency in self.samples if start <= at < end]
        return {
            "writes": len(lat),
            "writes_per_s": len(lat) / (end - start) if end > start else float("nan"),
            "p50_ms": percentile(lat, 50) * 1000,
            "p99_ms": percentile(lat, 99) * 1000,
            "max_ms": max(lat) * 1000 if lat else float("nan"),
        }


def with_writer(
    bench: Bench, make_op: Callable[[], Callable[[int], None]], work: Callable[[], Any]
) -> dict[str, Any]:
    """Run ``work`` while a writer commits; the writer's latency before and during it."""
    writer = Writer(make_op)
    writer.start()
    time.sleep(bench.plan.writer_before_s)
    before_start = writer.samples[0][0] if writer.samples else time.perf_counter()
    start = time.perf_counter()
    outcome = work()
    end = time.perf_counter()
    writer.stop()
    before = writer.window(before_start, start)
    during = writer.window(start, end)
    return {
        "seconds": end - start,
        "outcome": outcome,
        "writer_before": before,
        "writer_during": during,
        "writer_p99_growth": during["p99_ms"] / before["p99_ms"],
    }


def json_writer(bench: Bench) -> Callable[[], Callable[[int], None]]:
    """Single-row inserts into the peer's table, on the writer thread's own connection."""
    settings = _peer_settings()

    def make() -> Callable[[int], None]:
        conn = raw.connect(settings)
        cursor = conn.cursor()

        def op(n: int) -> None:
            cursor.execute(
                f"INSERT INTO {peer.TABLE} (id, updated, body) VALUES (%s, UTC_TIMESTAMP(6), %s)",
                (uuid.uuid4().bytes, json.dumps(writer_properties(n, "live-json"))),
            )

        return op

    return make


def _peer_settings() -> dict[str, Any]:
    from django.conf import settings

    return settings.DATABASES["peer"]


def run_alters(bench: Bench) -> list[dict[str, Any]]:
    cursor = bench.peer.conn.cursor()
    out = []
    for name, suffix in ALTERS.items():

        def alter(suffix: str = suffix) -> str:
            cursor.execute(f"ALTER TABLE {peer.TABLE} ADD INDEX {LINK_INDEX} (link){suffix}")
            return "done"

        bench.log(f"index add: {name} on {bench.size:,} rows, writer running")
        try:
            record = with_writer(bench, json_writer(bench), alter)
        except Exception as exc:  # e.g. an algorithm MariaDB refuses for this column
            record = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            cursor.execute(f"SHOW INDEX FROM {peer.TABLE} WHERE Key_name = %s", (LINK_INDEX,))
            if cursor.fetchall():
                cursor.execute(f"ALTER TABLE {peer.TABLE} DROP INDEX {LINK_INDEX}")
        out.append({"leg": "index_add", "contender": name, "size": bench.size, **record})
    return out


def run_chunked_copy(bench: Bench) -> dict[str, Any]:
    """``INSERT ... SELECT`` of ``(link, id)`` in 10k-row ``added_id`` ranges, autocommit."""
    conn = bench.peer.conn
    cursor = conn.cursor()
    cursor.execute("DROP TABLE IF EXISTS json_index_link")
    cursor.execute(
        "CREATE TABLE json_index_link (link VARCHAR(255) NOT NULL, entity_id BINARY(16) NOT NULL,"
        " PRIMARY KEY (link, entity_id), KEY json_index_link_entity (entity_id))"
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )

    def copy() -> dict[str, Any]:
        cursor.execute(f"SELECT COALESCE(MAX(added_id), 0) FROM {peer.TABLE}")
        (top,) = cursor.fetchone()
        rows = 0
        for lo in range(0, top, COPY_CHUNK):
            rows += cursor.execute(
                "INSERT IGNORE INTO json_index_link (link, entity_id) "
                f"SELECT link, id FROM {peer.TABLE} "
                "WHERE added_id > %s AND added_id <= %s AND link IS NOT NULL",
                (lo, min(top, lo + COPY_CHUNK)),
            )
            conn.commit()
        return {"rows": rows}

    bench.log(f"index add: chunked INSERT ... SELECT over {bench.size:,} rows, writer running")
    record = with_writer(bench, json_writer(bench), copy)
    record["rows_per_s"] = record["outcome"]["rows"] / record["seconds"]
    cursor.execute("DROP TABLE json_index_link")
    return {"leg": "index_add", "contender": "chunked_insert_select", "size": bench.size, **record}


def cleaner_available() -> bool:
    return importlib.util.find_spec("schemaless_store.cleaner") is not None


def run(bench: Bench) -> list[dict[str, Any]]:
    records = [*run_alters(bench), run_chunked_copy(bench)]
    if not cleaner_available():
        records.append(
            {
                "leg": "index_add",
                "contender": "ours_backfill",
                "size": bench.size,
                "pending": "schemaless_store.cleaner is not in the code yet: the live backfill "
                "(and the cleaner's peak memory) cannot be measured; nothing is reported for it",
            }
        )
    return records

"""Leg 4: adding an index to a loaded, live store while a writer keeps committing single puts.

Baselines, on the peer's JSON table of the same rows, with a writer inserting into that table:
``ALTER TABLE ... ADD INDEX`` on the ``link`` virtual column with the default algorithm, with
``ALGORITHM=INPLACE, LOCK=NONE`` and with ``ALGORITHM=COPY``; and a server-side chunked copy
(``INSERT ... SELECT`` in 10k-row primary-key ranges) into an index table.

Ours, the way an operator adds an index: declare ``index_link_<size>`` (here at run time, in
this process, so that this process's writer maintains it), ``manage.py migrateall`` (creates its
tables, records it ``building``), then ``manage.py runcleaner --index=... --once`` in a child
process while a writer thread commits ``Entity.objects.create`` puts. The backfill ends when the
index turns ``ready``; the writer stops there and the child is sent SIGTERM (it finishes its
batch of the repair pass that follows). The child's peak RSS is the cleaner's peak memory.
Without ``schemaless_store.cleaner`` that half is reported as pending, with no numbers.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .. import peer, raw
from ..context import Bench
from ..data import writer_properties
from ..load import forget_writes, settle
from ..stats import percentile

COPY_CHUNK = 10_000
LINK_INDEX = "json_entities_link"
ALTERS = {
    "alter_default": "",
    "alter_inplace_lock_none": ", ALGORITHM=INPLACE, LOCK=NONE",
    "alter_copy": ", ALGORITHM=COPY",
}


class Writer(threading.Thread):
    """Commits one write after another and records (start, latency) of each; starts are wall
    clock times (``time.time()``), so that windows can come from another process's records."""

    def __init__(
        self,
        make_op: Callable[[], Callable[[int], None]],
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.make_op = make_op  # called in the thread: connections belong to their thread
        self.on_stop = on_stop  # also in the thread, e.g. to close its connections
        self.samples: list[tuple[float, float]] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            op = self.make_op()
            clock, wall = time.perf_counter, time.time
            for n in itertools.count():
                if self.stopping.is_set():
                    return
                at, start = wall(), clock()
                op(n)
                self.samples.append((at, clock() - start))
        except BaseException as exc:  # reported by stop(), not lost in a thread
            self.error = exc
        finally:
            if self.on_stop is not None:
                self.on_stop()

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
            "over_100ms": sum(1 for x in lat if x > 0.1),
        }


def with_writer(
    bench: Bench,
    make_op: Callable[[], Callable[[int], None]],
    work: Callable[[], Any],
    on_stop: Callable[[], None] | None = None,
    during: Callable[[float, float], tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """Run ``work`` while a writer commits; the writer's latency before and during it.

    ``during(start, end)`` may narrow the "during" window (wall clock) to the part of the work
    that matters, e.g. the backfill passes without the cleaner process's start-up. Starts on a
    settled server and removes the writer's entities afterwards (the data set stays the same
    for the next contender).
    """
    settled = settle(bench)
    writer = Writer(make_op, on_stop)
    writer.start()
    time.sleep(bench.plan.writer_before_s)
    start = time.time()
    try:
        outcome = work()
    finally:
        end = time.time()
        writer.stop()
    before_start = writer.samples[0][0] if writer.samples else start
    window = during(start, end) if during is not None else (start, end)
    before = writer.window(before_start, start)
    during_stats = writer.window(*window)
    return {
        "settled_s": settled,
        "seconds": window[1] - window[0],
        "outcome": outcome,
        "writer_before": before,
        "writer_during": during_stats,
        "writer_p99_growth": during_stats["p99_ms"] / before["p99_ms"],
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


def run_alters(
    bench: Bench,
    writer: Callable[[], Callable[[int], None]] | None = None,
    alters: tuple[str, ...] = tuple(ALTERS),
    leg: str = "index_add",
) -> list[dict[str, Any]]:
    """Each of ``alters`` (:data:`ALTERS`) while ``writer`` (default: inserts) runs."""
    cursor = bench.peer.conn.cursor()
    out = []
    for name in alters:
        suffix = ALTERS[name]

        def alter(suffix: str = suffix) -> str:
            cursor.execute(f"ALTER TABLE {peer.TABLE} ADD INDEX {LINK_INDEX} (link){suffix}")
            return "done"

        bench.log(f"index add: {name} on {bench.size:,} rows, writer running")
        try:
            record = with_writer(bench, writer or json_writer(bench), alter)
        except Exception as exc:  # e.g. an algorithm MariaDB refuses for this column
            record = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            cursor.execute(f"SHOW INDEX FROM {peer.TABLE} WHERE Key_name = %s", (LINK_INDEX,))
            if cursor.fetchall():
                cursor.execute(f"ALTER TABLE {peer.TABLE} DROP INDEX {LINK_INDEX}")
        forget_writes(bench)
        out.append({"leg": leg, "contender": name, "size": bench.size, **record})
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
    forget_writes(bench)
    return {"leg": "index_add", "contender": "chunked_insert_select", "size": bench.size, **record}


def cleaner_available() -> bool:
    return importlib.util.find_spec("schemaless_store.cleaner") is not None


def store_writer() -> Callable[[int], None]:
    """Single puts through the store (entity + every declared index, the new one included)."""
    from schemaless_store.models import Entity

    def op(n: int) -> None:
        Entity.objects.create(**writer_properties(n, "live"))

    return op


def _close_thread_connections() -> None:
    from django.db import connections

    from schemaless_store.topology import shards

    shards.close_index_connections()
    connections.close_all()


def run_ours(
    bench: Bench,
    writer: Callable[[], Callable[[int], None]] = store_writer,
    leg: str = "index_add",
    table: str = "index_link",
) -> dict[str, Any]:
    """Declare a new index on the loaded store and backfill it with the cleaner, live, while
    ``writer`` (default: single puts) runs."""
    from django.core.management import call_command

    from schemaless_store.config.indexes import Index, registry
    from schemaless_store.models import CleanerPass
    from schemaless_store.tables import lifecycle
    from schemaless_store.topology import shards

    name = f"{table}_{bench.size}"
    index = Index(table=name, properties=["link"], shard_on="link")
    registry.register(index, module="bench.legs.index_add")
    call_command("migrateall", verbosity=0)  # its tables on every shard; recorded as building
    if lifecycle.states(refresh=True).get(name) != lifecycle.BUILDING:
        raise AssertionError(f"{name} should start building on a loaded store")
    bench.log(f"index add: ours, runcleaner --index={name} over {bench.size:,} entities")
    env = {**os.environ, "BENCH_LINK_INDEX": name, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    command = [sys.executable, "-m", "django", "runcleaner", f"--index={name}", "--once", "-v", "1"]
    # Extra runcleaner options to compare throttles, e.g. BENCH_CLEANER_ARGS="--duty 0.5".
    command += shlex.split(os.environ.get("BENCH_CLEANER_ARGS", ""))
    child: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryFile() as log:

        def backfill() -> str:
            proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            child.append(proc)
            while lifecycle.states(refresh=True).get(name) != lifecycle.READY:
                if proc.poll() is not None:
                    log.seek(0)
                    output = log.read().decode(errors="replace")[-3000:]
                    raise RuntimeError(f"runcleaner exited {proc.returncode}:\n{output}")
                time.sleep(0.02)
            return lifecycle.READY

        def backfill_window(start: float, end: float) -> tuple[float, float]:
            passes = CleanerPass.objects.filter(index_name=name, kind="backfill")
            begun = [p.started.timestamp() for p in passes]
            return (min(begun) if begun else start), end

        try:
            record = with_writer(
                bench,
                writer,
                backfill,
                on_stop=_close_thread_connections,
                during=backfill_window,
            )
        finally:
            registry.unregister(name)  # the benchmark's later loads do not maintain it
            usage = None
            for proc in child:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)  # it finishes its batch and exits 0
                _pid, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
    passes = list(CleanerPass.objects.filter(index_name=name, kind="backfill"))
    scanned = sum(p.entities_scanned for p in passes)
    pass_seconds = sum((p.finished - p.started).total_seconds() for p in passes if p.finished)
    rows = entities = 0
    for alias in shards.shard_aliases():
        rows += _count(alias, name)
        entities += _count(alias, "entities")
    record.update(
        rows_per_s=scanned / pass_seconds if pass_seconds else float("nan"),
        entities_backfilled=scanned,
        backfill_pass_seconds=pass_seconds,
        cleaner_peak_rss_mib=usage.ru_maxrss / 1024 if usage else float("nan"),
        cleaner_exit=child[0].returncode if child else None,
        cleaner_args=os.environ.get("BENCH_CLEANER_ARGS", ""),
        index_rows=rows,
        entities=entities,
        index_exact=rows == entities,  # every entity has one link: one row each
    )
    forget_writes(bench)
    return {"leg": leg, "contender": "ours_backfill", "size": bench.size, **record}


def _count(alias: str, table: str) -> int:
    from django.db import connections

    conn = connections[alias]
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {conn.ops.quote_name(table)}")
        return int(cursor.fetchone()[0])


def run(bench: Bench) -> list[dict[str, Any]]:
    records = [*run_alters(bench), run_chunked_copy(bench)]
    if cleaner_available():
        records.append(run_ours(bench))
    else:
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

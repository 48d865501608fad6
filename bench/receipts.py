"""``python -m bench.receipts``: what write receipts cost, and how big their table grows
(docs/performance.md#write-receipts).

    .venv/bin/python -m bench.receipts cost --blocks 60        # put and bulk_put, on vs off
    .venv/bin/python -m bench.receipts size --seconds 150 --retention 60
    .venv/bin/python -m bench.receipts raw                      # the row alone, no store
    .venv/bin/python -m bench.receipts prune --blocks 20        # a removal, with the line

Two throwaway MariaDB servers (the bench's), migrated. ``cost``: one process alternates blocks
of ``create()`` (20 per block) and of ``bulk_put`` (one batch of 500) with receipts on and off
(``writes.receipts.RECORD``, for this measurement only), the order swapped every block, so the
machine's load hits both alike; it prints the median latency and the client CPU per op of
each, and their ratios. ``size``: one process writes entities with ``create()`` for
``--seconds`` under ``SCHEMALESS["RECEIPT_RETENTION"] = --retention``, printing every 10 s the
writes so far and each shard's receipts (rows, and the table's data and index bytes from
``information_schema``, after ``ANALYZE TABLE``). With the writes running longer than the
retention, the rows stop growing near retention x write rate: the writers' own removals keep
the table bounded. ``raw``: the receipt alone, without the store: plain mysqlclient
transactions of one ``INSERT`` and a ``COMMIT``, against the same with the receipt's
``INSERT`` sent with the ``COMMIT``, alternating blocks of 25 (what a receipt costs
whatever the store around it does). ``prune``: a removal of expired receipts as the store
sends it since the pruned line (its ``UPDATE`` and ``DELETE`` in one query) against the lone
``DELETE`` from before, alternating, with 1,000 rows to remove and with none.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

from . import plan as plans

PUTS_PER_BLOCK = 20
_lines: list[str] = []


def emit(line: str) -> None:
    """Print a line of the result, and keep it for the file in ``--out``."""
    print(line, flush=True)
    _lines.append(line)


BATCH = 500


def cost(blocks: int) -> None:
    from schemaless_store.models import Entity
    from schemaless_store.writes import receipts

    latencies: dict[tuple[str, bool], list[float]] = {}
    cpu: dict[tuple[str, bool], float] = {}
    ops: dict[tuple[str, bool], int] = {}
    serial = iter(range(10**9))

    def put() -> None:
        Entity.objects.create(user_id=f"u{next(serial) % 100}", n=1, title="a receipt's cost")

    def bulk() -> None:
        Entity.objects.bulk_put(
            [{"user_id": f"u{next(serial) % 100}", "n": 1} for _ in range(BATCH)], BATCH
        )

    legs = {"put": (put, PUTS_PER_BLOCK), "bulk_put": (bulk, 1)}
    for block in range(blocks):
        for on in (True, False) if block % 2 else (False, True):
            receipts.RECORD = on
            for leg, (op, count) in legs.items():
                key = (leg, on)
                started = time.process_time()
                for _ in range(count):
                    begun = time.perf_counter()
                    op()
                    latencies.setdefault(key, []).append(time.perf_counter() - begun)
                cpu[key] = cpu.get(key, 0.0) + time.process_time() - started
                ops[key] = ops.get(key, 0) + count
        if (block + 1) % 10 == 0:
            print(f"bench.receipts: block {block + 1} of {blocks}", flush=True)
    receipts.RECORD = True
    emit("| leg | p50 off ms | p50 on ms | on / off (p50) | CPU us/op off | on | on / off |")
    emit("|---|---|---|---|---|---|---|")
    for leg in legs:
        p50 = {on: statistics.median(latencies[(leg, on)]) * 1000 for on in (False, True)}
        per_op = {on: cpu[(leg, on)] / ops[(leg, on)] * 1e6 for on in (False, True)}
        emit(
            f"| {leg} | {p50[False]:.3f} | {p50[True]:.3f} | {p50[True] / p50[False]:.3f}x | "
            f"{per_op[False]:,.0f} | {per_op[True]:,.0f} | {per_op[True] / per_op[False]:.3f}x |"
        )


def raw(blocks: int) -> None:
    import MySQLdb

    from schemaless_store.sql import dialects
    from schemaless_store.tables import receipts as receipt_table
    from schemaless_store.testing.mariadb import start_servers

    server = start_servers(1)[0]
    try:
        conn = MySQLdb.connect(host=server.host, port=server.port, user="root")
        cursor = conn.cursor()
        cursor.execute("CREATE DATABASE receipts_raw")
        cursor.execute("USE receipts_raw")
        cursor.execute(
            "CREATE TABLE entities (id BINARY(16) PRIMARY KEY, "
            "added_id BIGINT AUTO_INCREMENT UNIQUE, body MEDIUMBLOB)"
        )
        cursor.execute(receipt_table.create_statement(dialects.MARIADB))

        def transaction(receipt: bool) -> None:
            conn.begin()
            cursor.execute(
                "INSERT INTO entities (id, body) VALUES (%s, %s)", [os.urandom(16), b"x" * 120]
            )
            if receipt:
                result = {"added_id": 1, "created": 1}
                # The receipt and the COMMIT in one round trip, as a write's own commit sends them.
                batch = (os.urandom(16), int(time.time()), result)
                receipt_table.commit_batch(conn, [], batch, begin=False)
            else:
                conn.commit()

        latencies: dict[bool, list[float]] = {False: [], True: []}
        cpu = {False: 0.0, True: 0.0}
        for block in range(blocks):
            for on in (True, False) if block % 2 else (False, True):
                started = time.process_time()
                for _ in range(25):
                    begun = time.perf_counter()
                    transaction(on)
                    latencies[on].append(time.perf_counter() - begun)
                cpu[on] += time.process_time() - started
        emit("| transaction | p50 us | client CPU us |")
        emit("|---|---:|---:|")
        for on in (False, True):
            name = "INSERT + receipt with the COMMIT" if on else "INSERT + COMMIT"
            per_op = cpu[on] / len(latencies[on]) * 1e6
            emit(f"| {name} | {statistics.median(latencies[on]) * 1e6:.0f} | {per_op:.0f} |")
    finally:
        server.stop()


def prune(rounds: int) -> None:
    """A removal of 1,000 expired receipts (1,000 fresh ones stay), and one with nothing
    expired: the lone ``DELETE`` from before the pruned line against the line's ``UPDATE`` and
    the ``DELETE`` in one query with ``BEGIN`` and ``COMMIT`` (the store's route on MariaDB),
    alternating, on a throwaway server."""
    import MySQLdb

    from schemaless_store.sql import dialects, literals
    from schemaless_store.tables import receipts as receipt_table
    from schemaless_store.testing.mariadb import start_servers

    dialect = dialects.MARIADB
    server = start_servers(1)[0]
    try:
        conn = MySQLdb.connect(host=server.host, port=server.port, user="root")
        cursor = conn.cursor()
        cursor.execute("CREATE DATABASE receipts_prune")
        cursor.execute("USE receipts_prune")
        cursor.execute(receipt_table.create_statement(dialect))
        for sql, params in receipt_table.horizon_statements(dialect):
            cursor.execute(sql, params)
        conn.commit()
        steps = receipt_table.prune_steps(dialect, 600, receipt_table.REMOVE_BATCH)
        line = [literals.statement(conn, sql, params) for sql, params in steps]
        alone = dialect.delete_first(
            receipt_table.TABLE, f"created < {dialect.unix_now} - %s", "created", "created"
        )
        lone = literals.statement(conn, alone, [600, receipt_table.REMOVE_BATCH])
        now = int(time.time())

        def fill(expired: int) -> None:
            rows = [(os.urandom(16), now - 5000 + n // 100, "{}") for n in range(expired)]
            rows += [(os.urandom(16), now + 10 + n, "{}") for n in range(1000)]
            cursor.execute(f"DELETE FROM {receipt_table.TABLE}")
            cursor.executemany(receipt_table.INSERT, rows)
            conn.commit()

        def once(with_line: bool) -> float:
            begun = time.perf_counter()
            if with_line:
                receipt_table.commit_batch(conn, line, None, begin=True)
            else:
                cursor.execute(lone)
                conn.commit()
            return time.perf_counter() - begun

        emit("| removal | expired rows | p50 us | runs |")
        emit("|---|---:|---:|---:|")
        for expired, count in ((1000, rounds), (0, rounds * 10)):
            took: dict[bool, list[float]] = {False: [], True: []}
            fill(expired)
            for n in range(count):
                for with_line in (True, False) if n % 2 else (False, True):
                    if expired:
                        fill(expired)
                    took[with_line].append(once(with_line))
            for with_line in (False, True):
                name = "line UPDATE + DELETE, one query" if with_line else "lone DELETE"
                p50 = statistics.median(took[with_line]) * 1e6
                emit(f"| {name} | {expired} | {p50:.0f} | {count} |")
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.receipts")
    parser.add_argument("what", choices=("cost", "size", "raw", "prune"))
    parser.add_argument("--blocks", type=int, default=60, help="cost: blocks of each mode")
    parser.add_argument("--seconds", type=float, default=150.0, help="size: seconds of writes")
    parser.add_argument("--retention", type=float, default=60.0, help="size: RECEIPT_RETENTION")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    try:
        return run(args)
    finally:
        if _lines:
            args.out.mkdir(parents=True, exist_ok=True)
            path = args.out / f"receipts-{args.what}-{started.strftime('%Y%m%dT%H%M%SZ')}.md"
            title = (
                f"# Write receipts: {args.what}, "
                + (
                    f"{args.blocks} blocks"
                    if args.what in ("cost", "prune")
                    else f"{args.seconds:.0f} s, RECEIPT_RETENTION={args.retention:.0f}"
                )
                + f", load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
            )
            path.write_text("\n".join([title, "", *_lines]) + "\n")
            print(f"bench.receipts: wrote {path}")


def run(args: argparse.Namespace) -> int:
    if args.what == "raw":
        raw(args.blocks)
        return 0
    if args.what == "prune":
        prune(args.blocks)
        return 0
    from .run import start_databases

    servers = start_databases(plans.FULL.buffer_pool)
    try:
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        import django

        django.setup()
        from django.core.management import call_command
        from django.test import override_settings

        call_command("migrateall", verbosity=0)
        if args.what == "cost":
            cost(args.blocks)
            return 0
        from schemaless_store.config import conf
        from schemaless_store.models import Entity
        from schemaless_store.tables import receipts
        from schemaless_store.topology import shards

        def sizes() -> list[tuple[str, int, int]]:
            found = []
            for alias in shards.shard_aliases():
                with shards.connection(alias).cursor() as cursor:
                    cursor.execute(f"ANALYZE TABLE {receipts.TABLE}")
                    cursor.fetchall()
                    cursor.execute(
                        "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
                        [receipts.TABLE],
                    )
                    (size,) = cursor.fetchone()
                found.append((alias, receipts.count(alias), int(size)))
            return found

        settings = {**conf.get().raw, "RECEIPT_RETENTION": args.retention}
        with override_settings(SCHEMALESS=settings):
            start = time.monotonic()
            written, shown = 0, start
            while time.monotonic() - start < args.seconds:
                Entity.objects.create(user_id=f"u{written % 100}", n=written)
                written += 1
                if time.monotonic() - shown >= 10:
                    shown = time.monotonic()
                    report = ", ".join(
                        f"{alias}: {rows:,} rows, {size / 2**20:.1f} MiB"
                        for alias, rows, size in sizes()
                    )
                    emit(
                        f"{shown - start:5.0f} s  {written:,} writes "
                        f"({written / (shown - start):.0f}/s)  {report}",
                    )
    finally:
        for server in servers:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

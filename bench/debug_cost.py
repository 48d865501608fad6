"""``python -m bench.debug_cost``: what ``DEBUG=True`` costs the store, per operation.

    .venv/bin/python -m bench.debug_cost --entities 10000

With ``DEBUG=True`` Django records every statement of a connection (``connection.queries``):
its SQL with the parameters filled in, and how long it took. The store's own statements then go
through Django's recording cursor instead of the driver's (``shards.statement_cursor``). This
sets up the benchmark's servers and data (one size), then times the store's ``get``, a page of
30, ``create`` and ``bulk_put`` of 500 with ``DEBUG`` off and on, alternating, best of 5 (wall
and this process's CPU per op), and measures the SQL text a connection keeps: Django keeps a
connection's last 9,000 statements (``queries_log``) until ``reset_queries()``, which only a
request's start calls, so a long-running process with ``DEBUG=True`` (a worker, a management
command) holds them for good.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def per_op(op: Callable[[Any], Any], args: list[Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for arg in args:
        op(arg)
    n = len(args)
    return (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6


def recorded_bytes() -> int:
    """The SQL text this thread's connections have recorded, in bytes: Django's and the
    store's index writers (``shards.index_connection``, which ``reset_queries()`` never sees)."""
    from django.db import connections

    from schemaless_store.topology import shards

    writers = shards._local.__dict__.get("index_writers", {}).values()
    return sum(len(q["sql"]) for conn in [*connections.all(), *writers] for q in conn.queries_log)


def reset_all() -> None:
    from django.db import reset_queries

    from schemaless_store.topology import shards

    reset_queries()
    for writer in shards._local.__dict__.get("index_writers", {}).values():
        writer.queries_log.clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.debug_cost")
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="output directory")
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)

    from . import plan as plans
    from .data import stages, writer_properties
    from .legs import get, query
    from .load import forget_writes, load_stage
    from .run import setup

    bench = setup(plans.choose(quick=False, sizes=[args.entities], buffer_pool="256M"))
    for stage in stages([args.entities]):
        load_stage(bench, stage)

    from django.test.utils import override_settings

    from schemaless_store.models import Entity

    counter = itertools.count()
    ours_get = get.get_contenders(bench, 1)[0].op
    ours_page = query.page_contenders(bench, 1)[0].op
    ops: dict[str, tuple[Callable[[Any], Any], Callable[[], Any], int]] = {
        "get": (ours_get, lambda: get.random_ids(bench, 1)[0], 2000),
        "page of 30": (ours_page, bench.random_user, 300),
        "create": (
            lambda props: Entity.objects.create(**props),
            lambda: writer_properties(next(counter), "debug"),
            500,
        ),
        "bulk_put of 500": (
            lambda batch: Entity.objects.bulk_put(batch),
            lambda: [writer_properties(next(counter), "debug") for _ in range(500)],
            4,
        ),
    }
    lines = [
        f"# DEBUG's cost, {started.isoformat()} ({bench.size:,} entities; best of 5 alternating "
        "runs, per op)",
        "",
        "| operation | DEBUG | wall us/op | client CPU us/op | SQL recorded, bytes/op |",
        "|---|---|---:|---:|---:|",
    ]
    for name, (op, make_arg, n) in ops.items():
        best = {False: [math.inf, math.inf], True: [math.inf, math.inf]}
        recorded = 0.0
        for _ in range(5):
            for debug in (False, True):
                arguments = [make_arg() for _ in range(n)]
                with override_settings(DEBUG=debug):
                    op(arguments[0])  # warm
                    reset_all()
                    wall, cpu = per_op(op, arguments[1:])
                    if debug:
                        recorded = recorded_bytes() / (n - 1)
                    reset_all()
                best[debug] = [min(best[debug][0], wall), min(best[debug][1], cpu)]
        for debug in (False, True):
            wall, cpu = best[debug]
            shown = f"{recorded:,.0f}" if debug else "0"
            lines.append(f"| {name} | {debug} | {wall:,.0f} | {cpu:,.0f} | {shown} |")
        if name in ("create", "bulk_put of 500"):
            forget_writes(bench)
    bench.raw.close()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"debug-{started.strftime('%Y%m%dT%H%M%SZ')}.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"bench: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

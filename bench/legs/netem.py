"""Leg: the comparisons on a network with a round-trip delay (issue 26), no target.

``put``, ``bulk_put``, ``get``, ``get_many`` and the page query, exactly as their own legs run
them against raw mysqlclient, while :mod:`bench.netem` delays every packet between the client's
network namespace and the servers' (``tc netem`` on both ends of the veth pair: ~0.25 ms round
trip by default, ``bench.run --netem-ms``). They are reported as ``<leg>_netem``.

Beside the timings, two measurements that explain them:

- the round trip a statement pays now: the p50 of ``SELECT 1`` on a raw connection, with and
  without the delay;
- round trips per operation, ours and raw (statements and the client's ``commit()`` and
  ``autocommit()`` calls, counted by :func:`bench.round_trips.statements`): each one pays the
  delay, so a side that makes more of them loses more to it. This one needs no delay and is
  measured even when the machine refuses netem.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from ..context import Bench
from ..data import writer_properties
from ..round_trips import statements
from ..stats import percentile
from . import get, put, query

STATEMENT_OPS = 50
# Ops run before counting: connections open (the scatter threads' own too), caches warm.
WARM_OPS = 10


def _statements(op: Callable[[Any], Any], args: list[Any]) -> float:
    """Round trips per op (:func:`bench.round_trips.statements` counts them in the client)."""
    for arg in args[:WARM_OPS]:  # not what is counted
        op(arg)
    with statements() as sent:
        for arg in args[WARM_OPS:]:
            op(arg)
    return len(sent) / (len(args) - WARM_OPS)


def statements_per_op(bench: Bench) -> dict[str, dict[str, float]]:
    """Ours and raw, per operation kind."""
    from schemaless_store.models import Entity

    counter = itertools.count()
    n = WARM_OPS + STATEMENT_OPS
    gets = get.random_ids(bench, n)
    writes = [writer_properties(next(counter), "netem") for _ in range(n)]
    batch = bench.plan.bulk_batch
    batches = [
        [writer_properties(next(counter), "netem") for _ in range(batch)]
        for _ in range(WARM_OPS + 2)
    ]
    many = [get.random_ids(bench, 100) for _ in range(WARM_OPS + STATEMENT_OPS // 5)]
    users = query.random_users(bench, n)
    ours_page, raw_page = query.page_contenders(bench, 1)[:2]
    ours_get, raw_get = get.get_contenders(bench, 1)
    kinds: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], list[Any]]] = {
        "put": (lambda p: Entity.objects.create(**p), bench.raw.put, writes),
        "bulk_put": (
            lambda b: Entity.objects.bulk_put(b, batch_size=batch),
            bench.raw.put_batch,
            batches,
        ),
        "get": (ours_get.op, raw_get.op, gets),
        "get_many": (
            lambda ids: Entity.objects.get_many([i[0] for i in ids]),
            lambda ids: bench.raw.get_many([i[1] for i in ids]),
            many,
        ),
        "query_page": (ours_page.op, raw_page.op, users),
    }
    return {
        kind: {"ours": _statements(ours, args), "raw": _statements(raw, args)}
        for kind, (ours, raw, args) in kinds.items()
    }


def select_1_ms(bench: Bench, n: int = 200) -> float:
    """p50 of ``SELECT 1`` on a raw connection: the round trip a statement pays."""
    cursor = next(iter(bench.raw.entity_conns.values())).cursor()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        cursor.execute("SELECT 1")
        cursor.fetchall()
        out.append(time.perf_counter() - start)
    return percentile(out, 50) * 1000


def run(bench: Bench, network: Any, round_trip_ms: float, refused: str | None) -> dict[str, Any]:
    """The leg's record (``run["netem"]``), its comparisons under ``"comparisons"``; with
    ``refused`` (why the machine would not build the delayed network) statements only."""
    from ..load import forget_writes

    summary: dict[str, Any] = {"round_trip_ms": round_trip_ms, "size": bench.size}
    bench.log("netem: statements per operation")
    summary["statements_per_op"] = statements_per_op(bench)
    forget_writes(bench)
    if refused is not None:
        summary["refused"] = refused
        return summary
    summary["select_1_p50_ms_without"] = select_1_ms(bench)
    found: list[dict[str, Any]] = []
    with network.delay(round_trip_ms):
        summary["select_1_p50_ms_with"] = select_1_ms(bench)
        for name, leg in (
            ("put", put.run_put),
            ("bulk_put", put.run_bulk_put),
            ("get", get.run_get),
            ("get_many", get.run_get_many),
            ("query_page", query.run_page),
        ):
            bench.log(f"netem: {name} with {round_trip_ms:g} ms round trip")
            record = leg(bench)
            record["leg"] = f"{record['leg']}_netem"
            record["network_round_trip_ms"] = round_trip_ms
            found.append(record)
            if name in ("put", "bulk_put"):
                forget_writes(bench)
    summary["comparisons"] = found
    return summary

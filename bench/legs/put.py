"""Leg 1: writes. ``Entity.objects.create`` (entity + 2 index rows) and ``bulk_put`` against
mysqlclient issuing the same statements by hand."""

from __future__ import annotations

import itertools
from typing import Any

from ..context import Bench
from ..data import writer_properties
from ..stats import Contender, compare, result


def run_put(bench: Bench) -> dict[str, Any]:
    from schemaless_store.models import Entity

    plan = bench.plan
    counter = itertools.count()

    def make_args(_round: int, n: int) -> list[dict[str, Any]]:
        return [writer_properties(next(counter), "put") for _ in range(n)]

    timings = compare(
        [
            Contender("ours", lambda props: Entity.objects.create(**props), plan.put_ops),
            Contender("raw", bench.raw.put, plan.put_ops),
        ],
        make_args,
        plan.rounds,
    )
    return result(
        timings,
        [("ours", "raw")],
        leg="put",
        size=bench.size,
        what="Entity.objects.create(entity + 2 index rows) vs raw mysqlclient, same statements",
    )


def run_bulk_put(bench: Bench) -> dict[str, Any]:
    from schemaless_store.models import Entity

    plan = bench.plan
    counter = itertools.count()

    def make_args(_round: int, n: int) -> list[list[dict[str, Any]]]:
        return [
            [writer_properties(next(counter), "bulk") for _ in range(plan.bulk_batch)]
            for _ in range(n)
        ]

    timings = compare(
        [
            Contender(
                "ours",
                lambda batch: Entity.objects.bulk_put(batch, batch_size=plan.bulk_batch),
                plan.bulk_batches,
                units_per_op=plan.bulk_batch,
            ),
            Contender("raw", bench.raw.put_batch, plan.bulk_batches, units_per_op=plan.bulk_batch),
            Contender(
                "raw_same_sql",
                lambda batch: bench.raw.put_batch(batch, lock=True),
                plan.bulk_batches,
                units_per_op=plan.bulk_batch,
            ),
        ],
        make_args,
        plan.rounds,
        warmup=1,
    )
    return result(
        timings,
        [("ours", "raw"), ("ours", "raw_same_sql")],
        leg="bulk_put",
        size=bench.size,
        what=f"bulk_put of {plan.bulk_batch} new entities vs raw executemany batches, without "
        "and with (raw_same_sql) bulk_put's SELECT ... FOR UPDATE of the batch's ids "
        "(throughput in entities/s, latency per batch)",
    )

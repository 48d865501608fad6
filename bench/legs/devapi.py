"""Leg ``devapi`` (issue 28): what app developers reach for next, each against its sync or
plain twin in the same process.

- ``save_if_unchanged``: ``entity.save(if_unchanged=True)`` vs ``entity.save()`` of entities
  of the data set just read (target: throughput >= 0.95x). Both write the body they read, so
  the data set stays as it is.
- ``aget``: 100 ``await Entity.objects.aget(id=...)`` one after the other in one event loop
  vs 100 ``Entity.objects.get(id=...)`` (target >= 0.8x); and, for the record, the same 100
  awaited at once (``asyncio.gather``), as concurrent requests of an ASGI server would.
- ``mapentities_noop``: ``map_entities`` of a function that changes nothing, over the whole
  store, vs ``bulk_put`` of the same entities (entities per second; target >= 0.5x).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from ..context import Bench
from ..data import entity_id
from ..stats import Contender, Timings, compare, result

AGETS_PER_OP = 100


def _noop(entity: Any) -> None:
    """The mapped function: reads nothing, changes nothing."""


def run(bench: Bench) -> list[dict[str, Any]]:
    return [run_save(bench), run_aget(bench), run_orm_aget(bench), run_map(bench)]


def _random_ids(bench: Bench, n: int) -> list[uuid.UUID]:
    return [uuid.UUID(bytes=entity_id(bench.random_entity())) for _ in range(n)]


def run_save(bench: Bench) -> dict[str, Any]:
    from schemaless_store.models import Entity

    plan = bench.plan

    def make_args(_round: int, n: int) -> list[tuple[Any, Any]]:
        # Distinct entities for the two contenders, read before the clock starts.
        ids = _random_ids(bench, 2 * n)
        found = Entity.objects.get_many(ids)
        pairs = [(found[ids[2 * k]], found[ids[2 * k + 1]]) for k in range(n)]
        for a, b in pairs:
            a.body_properties()  # decoded, as an edited instance would be
            b.body_properties()
        return pairs

    timings = compare(
        [
            Contender("if_unchanged", lambda pair: pair[0].save(if_unchanged=True), plan.put_ops),
            Contender("plain", lambda pair: pair[1].save(), plan.put_ops),
        ],
        make_args,
        plan.rounds,
    )
    return result(
        timings,
        [("if_unchanged", "plain")],
        leg="save_if_unchanged",
        size=bench.size,
        what="entity.save(if_unchanged=True) vs entity.save() of an entity just read",
    )


def run_aget(bench: Bench) -> dict[str, Any]:
    from schemaless_store.models import Entity

    plan = bench.plan

    def sync_gets(batch: list[uuid.UUID]) -> None:
        for ident in batch:
            Entity.objects.get(id=ident)["title"]

    async def agets(batch: list[uuid.UUID]) -> None:
        for ident in batch:
            (await Entity.objects.aget(id=ident))["title"]

    async def gathered(batch: list[uuid.UUID]) -> None:
        for entity in await asyncio.gather(*(Entity.objects.aget(id=i) for i in batch)):
            entity["title"]

    ops = max(3, plan.get_ops // AGETS_PER_OP)
    timings = compare(
        [
            Contender("aget", lambda b: asyncio.run(agets(b)), ops, units_per_op=AGETS_PER_OP),
            Contender(
                "aget_gather",
                lambda b: asyncio.run(gathered(b)),
                ops,
                units_per_op=AGETS_PER_OP,
            ),
            Contender("get", sync_gets, ops, units_per_op=AGETS_PER_OP),
        ],
        lambda _r, n: [_random_ids(bench, AGETS_PER_OP) for _ in range(n)],
        plan.rounds,
    )
    return result(
        timings,
        [("aget", "get"), ("aget_gather", "get")],
        leg="aget",
        size=bench.size,
        what=f"{AGETS_PER_OP} awaited aget(id=...) in one asyncio.run() vs {AGETS_PER_OP} "
        "get(id=...), one process (throughput in entities/s)",
    )


def run_orm_aget(bench: Bench) -> dict[str, Any]:
    """The reference for ``aget``: Django's own async ORM, ``aget`` vs ``get`` of a row of a
    plain model (the stored shard map, on ``default``), built on the same ``sync_to_async``."""
    from schemaless_store.config.metadata import ShardMap
    from schemaless_store.topology import bucket_map

    plan = bench.plan
    version = bucket_map.stored().version

    def sync_gets(batch: list[int]) -> None:
        for number in batch:
            assert ShardMap.objects.get(version=number).owners

    async def agets(batch: list[int]) -> None:
        for number in batch:
            assert (await ShardMap.objects.aget(version=number)).owners

    ops = max(3, plan.get_ops // AGETS_PER_OP)
    timings = compare(
        [
            Contender("orm_aget", lambda b: asyncio.run(agets(b)), ops, AGETS_PER_OP),
            Contender("orm_get", sync_gets, ops, AGETS_PER_OP),
        ],
        lambda _r, n: [[version] * AGETS_PER_OP for _ in range(n)],
        plan.rounds,
    )
    return result(
        timings,
        [("orm_aget", "orm_get")],
        leg="orm_aget",
        size=bench.size,
        what=f"Django's ORM, for reference: {AGETS_PER_OP} awaited ShardMap.objects.aget() vs "
        f"{AGETS_PER_OP} get() (throughput in rows/s)",
    )


def run_map(bench: Bench) -> dict[str, Any]:
    """Whole-store passes, alternating; one pass is one op (units: the store's entities)."""
    from schemaless_store.mapping import map_entities
    from schemaless_store.models import Entity

    plan = bench.plan
    size = bench.size

    def mapped() -> None:
        summary = map_entities(_noop, restart=True)
        if not summary.ok or summary.seen < size:
            raise RuntimeError(f"mapentities did not walk the store: {summary.describe()}")

    def put() -> None:
        for stage in bench.loaded:
            for chunk in stage.chunks(500):
                Entity.objects.bulk_put(chunk, batch_size=500)

    timings = {name: Timings(units_per_op=size) for name in ("mapentities", "bulk_put")}
    contenders = [("mapentities", mapped), ("bulk_put", put)]
    for number in range(max(2, plan.backup_rounds)):
        order = contenders if number % 2 == 0 else contenders[::-1]
        for name, op in order:
            began = time.perf_counter()
            op()
            timings[name].rounds.append([time.perf_counter() - began])
    return result(
        timings,
        [("mapentities", "bulk_put")],
        leg="mapentities_noop",
        size=size,
        what="map_entities(a function that changes nothing) over every entity vs bulk_put of "
        "the same entities, batches of 500 (throughput in entities/s)",
    )

"""Leg 2: reads by id. ``Entity.objects.get`` and ``get_many(100 ids)`` against raw SQL by id;
both sides decode the bodies (ours on first property access, which the op does)."""

from __future__ import annotations

import uuid
from typing import Any

from ..context import Bench
from ..data import entity_id
from ..stats import Contender, compare, result

Ids = tuple[uuid.UUID, bytes]


def random_ids(bench: Bench, n: int) -> list[Ids]:
    out = []
    for _ in range(n):
        raw = entity_id(bench.random_entity())
        out.append((uuid.UUID(bytes=raw), raw))
    return out


def get_contenders(bench: Bench, ops: int) -> list[Contender]:
    from schemaless_store.models import Entity

    def ours(ids: Ids) -> None:
        Entity.objects.get(id=ids[0])["title"]

    def raw(ids: Ids) -> None:
        bench.raw.get(ids[1])["title"]  # type: ignore[index]

    return [Contender("ours", ours, ops), Contender("raw", raw, ops)]


def run_get(bench: Bench) -> dict[str, Any]:
    plan = bench.plan
    timings = compare(
        get_contenders(bench, plan.get_ops), lambda _r, n: random_ids(bench, n), plan.rounds
    )
    return result(
        timings,
        [("ours", "raw")],
        leg="get",
        size=bench.size,
        what="Entity.objects.get(id=...) vs raw SELECT by id, body decoded",
    )


def run_get_many(bench: Bench) -> dict[str, Any]:
    from schemaless_store.models import Entity

    plan = bench.plan

    def ours(batch: list[Ids]) -> None:
        for entity in Entity.objects.get_many([ids[0] for ids in batch]).values():
            entity["title"]

    def raw(batch: list[Ids]) -> None:
        bench.raw.get_many([ids[1] for ids in batch])

    timings = compare(
        [Contender("ours", ours, plan.get_many_ops), Contender("raw", raw, plan.get_many_ops)],
        lambda _r, n: [random_ids(bench, 100) for _ in range(n)],
        plan.rounds,
    )
    return result(
        timings,
        [("ours", "raw")],
        leg="get_many",
        size=bench.size,
        what="get_many(100 ids) vs raw SELECT ... IN per shard, bodies decoded",
    )

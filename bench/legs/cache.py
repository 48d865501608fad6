"""The entity cache leg (issue 20 part 2, issue 27, docs/cache.md): ``get`` and
``get_many(100)`` read through a Redis entity cache (a throwaway ``redis-server``), and through
the near cache in front of it (``ours_near``: hits from process memory), against raw mysqlclient
reading the primary, with the same reads uncached in the same rounds; the cost a write pays to
invalidate (``save()`` of an existing entity with the cache on, with the near cache on, and
off); the hit rates.

The caches are warmed first with every entity of the store (a working set that fits in Redis
and in the near cache, whose ``MAX_ENTRIES`` is the store's size): the read comparisons measure
hits; the hit rates report what they were. Switching ``NEAR_CACHE`` off for the other
contenders closes the near cache (issue 36), so ``ours_near``'s turn starts with a new one,
warmed with that round's ids before its clock starts (:class:`NearTurn`); what a miss costs is
``bench.ycsb``'s cold row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..context import Bench
from ..stats import Contender, compare, result
from .get import Ids, random_ids

WARM_BATCH = 500


def _settings(on: bool, near: int = 0) -> Any:
    """The entity cache on or off; ``near``: the near cache on too, with that many entries."""
    from django.conf import settings
    from django.test import override_settings

    return override_settings(
        SCHEMALESS={
            **settings.SCHEMALESS,
            "CACHE": "entities" if on else None,
            "NEAR_CACHE": {"MAX_ENTRIES": near} if near else None,
        }
    )


def warm(bench: Bench, near: int = 0) -> int:
    """Every entity of the store read through the cache once (the near cache too: ``near``);
    the number read."""
    from schemaless_store.models import Entity

    from ..data import entity_id

    total = 0
    with _settings(True, near):
        for start in range(0, bench.size, WARM_BATCH):
            ids = [entity_id(n) for n in range(start, min(start + WARM_BATCH, bench.size))]
            total += len(Entity.objects.get_many(ids))
    return total


class NearTurn:
    """``ours_near``'s turn: the near cache on, then warmed with the ids the round reads (the
    arguments ``make_args`` gave last: every contender of a round gets the same)."""

    def __init__(self, entries: int, ids_of: Callable[[Any], list[Any]]) -> None:
        self.entries = entries
        self.ids_of = ids_of
        self.args: Any = []

    def make_args(self, make: Callable[[int, int], Any]) -> Callable[[int, int], Any]:
        def recording(number: int, n: int) -> Any:
            self.args = make(number, n)
            return self.args

        return recording

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        from schemaless_store.cache import entity_cache
        from schemaless_store.models import Entity

        with _settings(True, self.entries):
            through = entity_cache.lookup()
            near = through.near if through is not None else None
            deadline = time.monotonic() + 10
            while near is not None and not near.usable() and time.monotonic() < deadline:
                time.sleep(0.01)
            ids = self.ids_of(self.args)
            for start in range(0, len(ids), WARM_BATCH):
                Entity.objects.get_many(ids[start : start + WARM_BATCH])
            yield


def run(bench: Bench) -> list[dict[str, Any]]:
    from schemaless_store.cache import entity_cache
    from schemaless_store.models import Entity

    plan = bench.plan
    bench.log(f"cache: warming with {bench.size:,} entities")
    warmed = warm(bench)
    entries = max(bench.size, 1)
    entity_cache.reset_stats()

    def get(ids: Ids) -> None:
        Entity.objects.get(id=ids[0])["title"]

    def raw_get(ids: Ids) -> None:
        bench.raw.get(ids[1])["title"]  # type: ignore[index]

    def get_many(batch: list[Ids]) -> None:
        for entity in Entity.objects.get_many([ids[0] for ids in batch]).values():
            entity["title"]

    def raw_get_many(batch: list[Ids]) -> None:
        bench.raw.get_many([ids[1] for ids in batch])

    def on() -> Any:
        return _settings(True)

    def off() -> Any:
        return _settings(False)

    def near() -> Any:
        return _settings(True, entries)

    records = []
    bench.log("cache: get")
    turn = NearTurn(entries, lambda args: [ids[0] for ids in args])
    timings = compare(
        [
            Contender("ours", get, plan.get_ops, around=on),
            Contender("ours_near", get, plan.get_ops, around=turn),
            Contender("raw", raw_get, plan.get_ops),
            Contender("ours_uncached", get, plan.get_ops, around=off),
        ],
        turn.make_args(lambda _r, n: random_ids(bench, n)),
        plan.rounds,
    )
    records.append(
        result(
            timings,
            [
                ("ours", "raw"),
                ("ours", "ours_uncached"),
                ("ours_near", "raw"),
                ("ours_near", "ours"),
            ],
            leg="cache_get",
            size=bench.size,
            what="Entity.objects.get(id=...) through a warm Redis entity cache (ours) and through "
            "the near cache in front of it (ours_near) vs raw SELECT by id on the primary (and vs "
            "the same get uncached), body decoded",
        )
    )
    bench.log("cache: get_many(100)")
    turn = NearTurn(entries, lambda args: [ids[0] for batch in args for ids in batch])
    timings = compare(
        [
            Contender("ours", get_many, plan.get_many_ops, around=on),
            Contender("ours_near", get_many, plan.get_many_ops, around=turn),
            Contender("raw", raw_get_many, plan.get_many_ops),
            Contender("ours_uncached", get_many, plan.get_many_ops, around=off),
        ],
        turn.make_args(lambda _r, n: [random_ids(bench, 100) for _ in range(n)]),
        plan.rounds,
    )
    records.append(
        result(
            timings,
            [
                ("ours", "raw"),
                ("ours", "ours_uncached"),
                ("ours_near", "raw"),
                ("ours_near", "ours"),
            ],
            leg="cache_get_many",
            size=bench.size,
            what="get_many(100 ids) through a warm Redis entity cache (ours) and the near cache "
            "in front of it (ours_near) vs raw SELECT ... IN per shard on the primaries (and vs "
            "uncached), bodies decoded",
        )
    )
    read_stats = dataclasses.replace(entity_cache.stats)  # what the reads above did (warming too)
    looked = read_stats.hits + read_stats.misses

    bench.log("cache: save() of an existing entity, invalidating and not")
    counter = itertools.count()
    with _settings(True):
        targets = list(Entity.objects.get_many([i[0] for i in random_ids(bench, 200)]).values())

    def save(entity: Any) -> None:
        entity["cache_bench"] = next(counter)
        entity.save()

    timings = compare(
        [
            Contender("ours", save, plan.put_ops, around=on),
            Contender("ours_near", save, plan.put_ops, around=near),
            Contender("ours_uncached", save, plan.put_ops, around=off),
        ],
        lambda _r, n: [targets[k % len(targets)] for k in range(n)],
        plan.rounds,
    )
    saved = result(
        timings,
        [("ours", "ours_uncached"), ("ours_near", "ours_uncached")],
        leg="cache_invalidate",
        size=bench.size,
        what="save() of an existing entity with the entity cache on (one DEL after the commit), "
        "with the near cache on too (and its eviction of this process's copy), vs off",
    )
    records.append(saved)
    for record in records[:2]:
        record["cache"] = {
            "warmed": warmed,
            "hits": read_stats.hits,
            "misses": read_stats.misses,
            "hit_rate": read_stats.hits / looked if looked else None,
            "near_hits": read_stats.near_hits,
            "failures": read_stats.failures,
        }
    return records

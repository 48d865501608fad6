"""Leg 3b: a scatter-gather page against a pinned page (issue 4).

A page whose conditions do not pin the index's ``shard_on`` value must read every index shard.
The leg declares ``index_published_<size>`` (property ``published``, ``shard_on="published"``)
on the loaded store, backfills it with the Cleaner in this process, and
compares, in alternating rounds:

- ``ours``: ``filter_index(published__lt=t).order_by("-published")[:30]``: the 30 newest entities
  before ``t``, of many users, so the index rows live on both shards: both are read at once with
  ``LIMIT 30`` each and merged (k-way), then the entities are fetched and re-checked;
- ``pinned``: ours' page of one user, ``filter_index(user_id=u).order_by("-published")[:30]``
  (one index shard), the page the issue compares against ("less than 2x a pinned page");
- ``raw``: mysqlclient doing the scatter by hand: the same index query on each shard one after
  the other, merge, one ``IN`` per entity shard, decode, re-check.

Afterwards the index is forgotten (retired and its tables dropped), so later legs write the same
indexes as before.
"""

from __future__ import annotations

import heapq
from typing import Any

from ..context import Bench
from ..data import PUBLISHED_0
from ..stats import Contender, compare, result

PAGE = 30
SCATTER_PAGE = (
    "SELECT published, entity_id FROM {table} WHERE published < %s "
    "ORDER BY published DESC, entity_id DESC LIMIT %s"
)


def declare(bench: Bench) -> str:
    """The unpinned index, declared and backfilled; its name."""
    from django.core.management import call_command

    from schemaless_store.cleaner import Cleaner
    from schemaless_store.config.indexes import Index, registry
    from schemaless_store.tables import lifecycle

    name = f"index_published_{bench.size}"
    index = Index(
        table=name, properties=["published"], shard_on="published", types={"published": "int"}
    )
    registry.register(index, module="bench.legs.scatter")
    call_command("migrateall", verbosity=0)
    bench.log(f"scatter: backfilling {name} over {bench.size:,} entities")
    Cleaner(indexes=[name], once=True, batch_size=2000).run()
    state = lifecycle.states(refresh=True).get(name)
    if state != lifecycle.READY:
        raise AssertionError(f"{name} is {state} after its backfill")
    return name


def forget(name: str) -> None:
    """Stop maintaining the leg's index and drop its tables (the next legs are unchanged)."""
    from django.core.management import call_command

    from schemaless_store.config.indexes import registry

    registry.unregister(name)
    call_command("migrateall", verbosity=0)  # records it retired
    call_command("dropindex", name, interactive=False, verbosity=0)


def raw_scatter(bench: Bench, table: str, before: int, size: int = PAGE) -> list[dict[str, Any]]:
    """The scatter page by hand: each shard's index rows, merged, fetched, re-checked."""
    store = bench.raw
    sql = SCATTER_PAGE.format(table=table)
    streams = []
    for conn in store.index_conns.values():
        cursor = conn.cursor()
        cursor.execute(sql, (before, size))
        streams.append(cursor.fetchall())
    rows = list(heapq.merge(*streams, reverse=True))[:size]
    found = store.get_many([row[1] for row in rows])
    out = []
    for published, entity_id in rows:
        properties = found.get(entity_id)
        if properties is not None and properties.get("published") == published:
            out.append(properties)
    return out


def contenders(bench: Bench, table: str, ops: int) -> list[Contender]:
    from schemaless_store.models import Entity

    def ours(arg: tuple[int, int]) -> list[Any]:
        page = Entity.objects.filter_index(published__lt=arg[1]).order_by("-published")[:PAGE]
        return [entity.body_properties() for entity in page]

    def pinned(arg: tuple[int, int]) -> list[Any]:
        page = Entity.objects.filter_index(user_id=arg[0]).order_by("-published")[:PAGE]
        return [entity.body_properties() for entity in page]

    return [
        Contender("ours", ours, ops),
        Contender("pinned", pinned, ops),
        Contender("raw", lambda arg: raw_scatter(bench, table, arg[1]), ops),
    ]


def random_args(bench: Bench, n: int) -> list[tuple[int, int]]:
    """(a user for the pinned page, a ``published`` bound with 30+ older entities)."""
    return [
        (bench.random_user(), PUBLISHED_0 + 7 * bench.rng.randrange(PAGE + 1, bench.size))
        for _ in range(n)
    ]


def check_answers(bench: Bench, table: str, found: list[Contender]) -> int:
    """Ours and raw give the same page (same titles, same order), every entity of it older
    than the bound, and from both shards' index rows; the count of hits."""
    _user, before = random_args(bench, 1)[0]
    ours = [p["title"] for p in found[0].op((0, before))]
    theirs = [p["title"] for p in raw_scatter(bench, table, before)]
    if ours != theirs or len(ours) != PAGE:
        raise AssertionError(f"scatter page: ours {ours[:3]}... != raw {theirs[:3]}...")
    return len(ours)


def run(bench: Bench) -> list[dict[str, Any]]:
    name = declare(bench)
    try:
        found = contenders(bench, name, bench.plan.query_ops)
        hits = check_answers(bench, name, found)
        timings = compare(found, lambda _r, n: random_args(bench, n), bench.plan.rounds)
    finally:
        forget(name)
    return [
        result(
            timings,
            [("ours", "pinned"), ("ours", "raw")],
            leg="query_scatter",
            size=bench.size,
            hits=hits,
            what=f'filter_index(published__lt=t).order_by("-published")[:{PAGE}] over both '
            "index shards (index (published), shard_on=published) vs ours' pinned page "
            f'filter_index(user_id=u).order_by("-published")[:{PAGE}] vs raw doing the scatter '
            "by hand (shards one after the other)",
        )
    ]

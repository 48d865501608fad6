"""Leg ``layout`` (``--legs layout``, not in the default set): the query legs on both layouts of
``entities`` in one run (docs/design.md#the-entities-table).

The store's shards are clustered by id (a new store's layout): the page and ``query_all``
comparisons run, then every shard is turned to the seed layout (``PRIMARY KEY (added_id)``) by
the online ``ALTER`` and they run again, then the shards are clustered by id again. Legs are
reported as ``query_page[_placed]_layout_id`` and ``..._layout_seed``; each record carries the
plan MariaDB chose for the page's join to ``entities`` (``EXPLAIN FORMAT=JSON``: its access
type and key), InnoDB's logical page reads per page query (``Innodb_buffer_pool_read_requests``
over both shard servers: the descents themselves) and the seconds each ``ALTER`` took.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..context import Bench
from . import query


def _join_plan(alias: str) -> dict[str, Any]:
    """How the page's scan reaches ``entities`` on ``alias``: ``{"access_type", "key"}``."""
    from django.db import connections

    from schemaless_store.config.indexes import registry
    from schemaless_store.tables import scans

    conn = connections[alias]
    index = registry.get("index_user_published")
    # A printable value: MariaDB writes the literal into the plan's JSON unescaped.
    user = b"u"
    sql = scans.scan_sql(
        conn.vendor, conn.ops.quote_name, index, [("user_id", "exact", user)], [1], True, True
    )
    with conn.cursor() as cursor:
        cursor.execute(
            f"EXPLAIN FORMAT=JSON {sql.select} WHERE {sql.where[0]} ORDER BY {sql.order} LIMIT 30",
            [user],
        )
        plan = json.loads(cursor.fetchone()[0])
    for step in plan["query_block"].get("nested_loop", []):
        table = step["table"]
        if table["table_name"] == "e":
            return {"access_type": table.get("access_type"), "key": table.get("key")}
    return {"access_type": None, "key": None}


def _page_reads(bench: Bench, pages: int = 100) -> dict[str, float]:
    """InnoDB's logical page reads (``Innodb_buffer_pool_read_requests``, summed over the two
    servers) per page query, ours and the JSON column's: the B-tree pages a page walks, counted
    by the servers. Nothing else runs meanwhile (a shard map refresh would add a few)."""
    from django.db import connections

    from schemaless_store.models import Entity
    from schemaless_store.topology import shards

    def requests() -> int:
        total = 0
        for alias in shards.shard_aliases():  # shard_0 on the first server, shard_1 the second
            with connections[alias].cursor() as cursor:
                cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_read_requests'")
                total += int(cursor.fetchone()[1])
        return total

    users = query.random_users(bench, pages)
    found = {}
    for name, page in (
        (
            "ours",
            lambda u: list(Entity.objects.filter_index(user_id=u).order_by("-published")[:30]),
        ),
        ("json_column", lambda u: bench.peer.page(u, 30)),
    ):
        before = requests()
        for user in users:
            page(user)
        found[name] = (requests() - before) / pages
    return found


def _relayout(to_seed: bool) -> float:
    from django.db import connections

    from schemaless_store.sql import layout
    from schemaless_store.tables import clustering
    from schemaless_store.topology import shards

    began = time.perf_counter()
    for alias in shards.shard_aliases():
        if to_seed and layout.clustered_by(connections[alias]) != layout.SEED:
            with connections[alias].cursor() as cursor:
                cursor.execute(layout.to_seed(cursor, 30))
        elif not to_seed:
            clustering.cluster(alias, wait=30)
    return time.perf_counter() - began


def run(bench: Bench) -> list[dict[str, Any]]:
    from django.db import connections

    from schemaless_store.sql import layout
    from schemaless_store.topology import shards

    alias = shards.shard_aliases()[0]
    records: list[dict[str, Any]] = []
    for name, to_seed in (("id", False), ("seed", True)):
        altered = _relayout(to_seed) if to_seed else 0.0
        clustered = layout.clustered_by(connections[alias])
        bench.log(f"layout: entities clustered by {clustered}")
        join = _join_plan(alias)
        reads = _page_reads(bench)
        bench.log(
            f"layout: buffer pool page reads per page query: {reads['ours']:.0f} ours, "
            f"{reads['json_column']:.0f} the JSON column's"
        )
        for record in query.run(bench):
            record["leg"] += f"_layout_{name}"
            record["layout"] = {
                "clustered_by": clustered,
                "join": join,
                "alter_s": altered,
                "page_reads_per_page": reads,
            }
            records.append(record)
    _relayout(to_seed=False)
    return records

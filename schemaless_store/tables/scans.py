"""The read path's index scans: one batch of an index table's rows on one shard, in the
query's order, after a keyset, optionally joined with the entities of the same shard."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..config.indexes import Index
from ..sql import keyset
from ..topology import shards
from . import rechecks

SQL_OPERATORS = {"exact": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


class ScanSQL(NamedTuple):
    select: str  # SELECT ... FROM ...
    where: tuple[str, ...]  # the conditions' clauses (values are parameters)
    order: str  # ORDER BY columns
    sort_columns: list[str]  # the columns of the keyset
    having: str = ""  # the re-check on the server (rechecks.py), after WHERE, before LIMIT
    select_params: tuple[Any, ...] = ()  # the parameters of ``select``, before the WHERE's


# (backend, index, condition shape, sort, direction, join) -> the scan's SQL pieces.
_CACHE: dict[tuple[Any, ...], ScanSQL] = {}
_CACHE_MAX = 512  # IN lists of many lengths make many shapes: start over past this


def scan_sql(
    vendor: str,
    quote: Callable[[str], str],
    index: Index,
    conds: Sequence[tuple[str, str, Any]],
    sort_positions: Sequence[int],
    descending: bool,
    join_entities: bool,
    checked_buckets: int = 0,
) -> ScanSQL:
    """The SQL of a scan of ``index`` for ``conds`` (``(property, lookup, column value)``),
    built once per shape of query. With ``join_entities``, each row brings the entity that lives
    on the same shard (``added_id, updated, body``; NULLs for the others).

    ``checked_buckets`` (with ``join_entities``, MariaDB, a :func:`.rechecks.plain` index): the
    joined entity is re-checked on the server, its verdict (TRUE, FALSE, NULL: see
    :mod:`.rechecks`) a fourth column after the body, and a row whose entity is proven not to
    imply it is left out, when that entity's placed id carries one of this many buckets (the
    buckets the scan reads, which the shard owns: the entity here is the one that counts; a
    copy a bucket move left behind is never judged). The scan's parameters then start with
    :attr:`ScanSQL.select_params`, then the bucket count, then those buckets."""
    shape = tuple((p, lookup, len(v) if lookup == "in" else 0) for p, lookup, v in conds)
    key = (
        vendor,
        index.name,
        index.properties,
        shape,
        tuple(sort_positions),
        descending,
        join_entities,
        checked_buckets,
    )
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    names = [*index.properties, "entity_id"]

    def col(name: str) -> str:
        return f"i.{quote(name)}"

    where = []
    for prop, lookup, count in shape:
        if lookup == "in":
            where.append(f"{col(prop)} IN ({', '.join(['%s'] * count)})")
        else:
            where.append(f"{col(prop)} {SQL_OPERATORS[lookup]} %s")
    direction = " DESC" if descending else ""
    order = ", ".join(f"{col(names[p])}{direction}" for p in sort_positions)
    selected = ", ".join(col(c) for c in names)
    table = f"{quote(index.name)} i"
    if join_entities:
        # The entities on this shard come along: one round trip instead of two.
        # updated as text, as ENTITY_COLUMNS reads it (tables/entities.py).
        selected += ", e.added_id, CAST(e.updated AS CHAR), e.body"
        table += f" LEFT JOIN entities e ON e.id = {col('entity_id')}"
    having, select_params = "", ()
    check = rechecks.implies_sql(index, "i", quote) if join_entities and checked_buckets else None
    if check is not None:
        marks = ", ".join(["%s"] * checked_buckets)
        selected += (
            f", ({check[0]}) AS recheck, "
            f"({rechecks.placed_bucket_sql(col('entity_id'))} IN ({marks})) AS judged"
        )
        having = "recheck IS NOT FALSE OR judged IS NOT TRUE"
        select_params = tuple(check[1])
    built = ScanSQL(
        f"SELECT {selected} FROM {table}",
        tuple(where),
        order,
        [col(names[p]) for p in sort_positions],
        having,
        select_params,
    )
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = built
    return built


def read_batch(
    alias: str,
    sql: ScanSQL,
    params: Sequence[Any],
    last: Sequence[Any] | None,
    descending: bool,
    limit: int,
) -> list[tuple[Any, ...]]:
    """At most ``limit`` rows of the scan on ``alias`` after the sort key ``last``."""
    clauses, args = list(sql.where), list(params)
    if last is not None:
        bound, bound_args = keyset.after(sql.sort_columns, last, descending)
        clauses.append(bound)
        args.extend(bound_args)
    text = (
        sql.select
        + (f" WHERE {' AND '.join(clauses)}" if clauses else "")
        + (f" HAVING {sql.having}" if sql.having else "")
        + f" ORDER BY {sql.order} LIMIT {int(limit)}"
    )
    return shards.read(alias, text, args)

"""Counting the rows of the store's tables, for the admin and the commands."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import DatabaseError

from ..config.indexes import is_identifier
from ..exceptions import ShardUnavailable
from ..sql import dialects
from ..topology import shards

# MariaDB's estimate (information_schema) is used from this many rows: counting would scan.
EXACT_COUNT_BELOW = 100_000


@dataclass
class TableCount:
    rows: int | None = None  # None: unknown (see error)
    estimated: bool = False
    error: str = ""

    @property
    def text(self) -> str:
        if self.rows is None:
            return self.error
        return ("≈ " if self.estimated else "") + f"{self.rows:,}"


def count_tables(alias: str, tables: Iterable[str]) -> dict[str, TableCount]:
    """Rows of each table on one shard: exact, or MariaDB's estimate for big tables
    (:data:`EXACT_COUNT_BELOW`). A missing table or an unreachable shard is reported in
    ``error``, never raised."""
    tables = list(tables)
    wanted = [t for t in dict.fromkeys(tables) if is_identifier(t)]
    result = {t: TableCount(error="not a valid table name") for t in tables if t not in wanted}
    conn = shards.connection(alias)
    quote = conn.ops.quote_name
    try:
        with shards.errors_named(alias), conn.cursor() as cursor:
            existing = set(conn.introspection.table_names(cursor))
            estimates: dict[str, int] = {}
            if dialects.of(conn).information_schema:
                cursor.execute(
                    "SELECT TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES "
                    "WHERE TABLE_SCHEMA = DATABASE()"
                )
                estimates = {name: int(rows or 0) for name, rows in cursor.fetchall()}
            for table in wanted:
                if table not in existing:
                    result[table] = TableCount(error="table missing")
                elif table in estimates and estimates[table] >= EXACT_COUNT_BELOW:
                    result[table] = TableCount(rows=estimates[table], estimated=True)
                else:
                    cursor.execute(f"SELECT COUNT(*) FROM {quote(table)}")
                    result[table] = TableCount(rows=int(cursor.fetchone()[0]))
    except ShardUnavailable as exc:
        return {t: TableCount(error=str(exc)) for t in tables}
    except DatabaseError as exc:
        return {t: TableCount(error=f"database error: {exc}") for t in tables}
    return result


def exact_count(alias: str, table: str) -> int | None:
    """``COUNT(*)`` of a table on one shard; None if it does not exist."""
    if not is_identifier(table):
        raise ValueError(f"{table!r} is not a table name")
    conn = shards.connection(alias)
    with shards.errors_named(alias), conn.cursor() as cursor:
        if table not in conn.introspection.table_names(cursor):
            return None
        cursor.execute(f"SELECT COUNT(*) FROM {conn.ops.quote_name(table)}")
        return int(cursor.fetchone()[0])

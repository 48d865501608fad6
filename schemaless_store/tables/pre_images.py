"""The target's pre-images during a move: what each row it changes was at the flip.

After the flip the target owns the buckets and takes writes, while the verification compares
the sources' rows with the target's *as they were at the flip*. A mover that keeps running
holds a snapshot of the target taken at the flip; one killed after the flip was published has
lost it. So from the end of the catch-up to the verdict, an ``AFTER`` trigger on each of the
target's tables records, in the writer's own statement (so in its transaction), the first
change of each row since the flip (:func:`clear`): the old row (``OLD.*``, ``present`` 1) for
an ``UPDATE`` or a ``DELETE``; for an ``INSERT`` the new row, marked absent (``present`` 0).
Later changes of the row leave that entry as it is (one entry per natural key).
The target at the flip is then its rows now, with each recorded row put back as it was, or
taken out if it was absent (:mod:`..moves.at_flip`, which reads both in one snapshot).

One table per moved table, ``schemaless_move_pre_<hash>``: ``present``, the moved columns as
the server declares them, and the natural key as its primary key. A repeated change finds the
key there and inserts nothing; InnoDB locks a duplicate of a clustered key without its gap, so
two writers' first changes of neighbouring rows never wait on each other. A row's natural key
never changes in an ``UPDATE`` the store makes; one that did would leave its new key's row
counted as if it had been there at the flip: the copies would differ and the move fail, never
pass.

Only the target gets these triggers: the sources' (:mod:`.move_log`) stay a single insert into
the log. Like them, on MariaDB each ignores a missing table (a trigger left behind never fails
a write), and each is proven by a probe write (:mod:`.capture_probe`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..config.indexes import is_identifier
from ..exceptions import ConfigurationError, MoveRefused
from ..sql import dialects, keyset
from ..sql.values import plain_row
from ..topology import shards
from .moved_rows import MovedTable

PREFIX = "schemaless_move_pre_"
# (event, the row recorded, trigger name suffix): an insert records its new row as absent.
EVENTS = (("INSERT", "NEW", "pi"), ("UPDATE", "OLD", "pu"), ("DELETE", "OLD", "pd"))


def table_name(table: str) -> str:
    """The pre-image table of ``table``."""
    return PREFIX + hashlib.blake2b(table.encode(), digest_size=6).hexdigest()


def create(cursor: Any, conn: BaseDatabaseWrapper, tables: Sequence[MovedTable]) -> None:
    """Create each table's pre-image table, its columns declared as the table's own are. A
    kept one (Galera, :func:`.move_log.keeps_tables`) is never dropped here: one whose
    columns or key differ from what its table needs now refuses the move
    (:class:`MoveRefused`, naming the table and the next step)."""
    quote = conn.ops.quote_name
    dialect = dialects.of(conn)
    for table in tables:
        if not is_identifier(table.name):
            raise ConfigurationError(f"{table.name!r} is not a valid table name")
        declared = dialect.declared_columns(cursor, table.name)
        _refuse_another_shape(cursor, dialect, table, declared)
        columns = [
            f"{quote(c)} {declared[c]}" + (" NOT NULL" if c in table.natural_key else "")
            for c in table.columns
        ]
        key = ", ".join(quote(c) for c in table.natural_key)
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {table_name(table.name)} (present {dialect.int_type} "
            f"NOT NULL, {', '.join(columns)}, PRIMARY KEY ({key})){dialect.clustered_table_options}"
        )


def _refuse_another_shape(
    cursor: Any, dialect: Any, table: MovedTable, declared: dict[str, str]
) -> None:
    """Refuse a kept pre-image table of ``table`` whose columns (their declarations) or
    primary key are not what ``table`` needs now (its table was made again since the last
    move): dropping it while writers run could lose their commits on Galera."""
    name = table_name(table.name)
    kept = dialect.declared_columns(cursor, name)
    if not kept:
        return
    wanted = {"present", *table.columns}
    same = set(kept) == wanted and all(kept[c] == declared[c] for c in table.columns)
    if same and dialect.information_schema:
        cursor.execute(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = "
            "DATABASE() AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            [name],
        )
        same = tuple(str(c) for (c,) in cursor.fetchall()) == tuple(table.natural_key)
    if not same:
        raise MoveRefused(
            f"the pre-image table {name} kept from an earlier move does not fit "
            f"{table.name} as it is declared now (its columns or key differ), and it is not "
            "dropped while writers run (on Galera that can lose their commits: "
            "docs/replicas.md#move-tables-stay-on-galera). Next: drop it by hand with "
            f"DROP TABLE {name} while no move runs, then run the same movebuckets again"
        )


def action(conn: BaseDatabaseWrapper, table: MovedTable, row: str) -> str:
    """The statement a trigger runs for a changed row (``OLD`` recorded present, ``NEW``
    absent), unless the row has an entry already."""
    quote = conn.ops.quote_name
    columns = ["present", *(quote(c) for c in table.columns)]
    values = ["1" if row == "OLD" else "0", *(f"{row}.{quote(c)}" for c in table.columns)]
    key = [1 + table.columns.index(c) for c in table.natural_key]
    return dialects.of(conn).insert_once(table_name(table.name), columns, values, key)


def drop(cursor: Any, tables: Sequence[MovedTable]) -> None:
    for table in tables:
        cursor.execute(f"DROP TABLE IF EXISTS {table_name(table.name)}")


def kept(alias: str, tables: Sequence[MovedTable]) -> bool:
    """Whether ``alias`` has the pre-image table of every one of ``tables``."""
    return len(having(alias, tables)) == len(tables)


def having(alias: str, tables: Sequence[MovedTable]) -> list[MovedTable]:
    """Those of ``tables`` whose pre-image table ``alias`` has."""
    conn = connections[alias]
    with shards.errors_named(alias), conn.cursor() as cursor:
        names = set(conn.introspection.table_names(cursor))
    return [table for table in tables if table_name(table.name) in names]


def clear(alias: str, tables: Sequence[MovedTable], batch: int) -> None:
    """Delete every entry (at the flip: the first change of a row from then on counts), in
    statements of at most ``batch`` rows (a Galera write-set limit; a pause of the writers
    that one long statement would lengthen)."""
    conn = connections[alias]
    quote, dialect = conn.ops.quote_name, dialects.of(conn)
    with shards.errors_named(alias), conn.cursor() as cursor:
        for table in tables:
            key = ", ".join(quote(c) for c in table.natural_key)
            delete_all(cursor, dialect, table_name(table.name), key, batch)


def delete_all(cursor: Any, dialect: Any, table: str, key: str, batch: int) -> None:
    """Delete every row of ``table`` in statements of at most ``batch`` rows, in ``key``
    order (the pre-images, and a kept move log: :func:`.move_log.keeps_tables`)."""
    statement = dialect.delete_first(table, "1 = 1", key, key)
    while True:
        cursor.execute(statement, [int(batch)])
        if cursor.rowcount < batch:
            return


def read(
    alias: str, table: MovedTable, batch: int, conn: BaseDatabaseWrapper | None = None
) -> Iterator[tuple[bool, tuple[Any, ...]]]:
    """Every entry ``(present, row)`` of ``table``'s pre-images (``row``: its ``columns``), in
    natural-key order, pages of ``batch`` (read on ``conn``, if given: a snapshot's)."""
    conn = conn or shards.connection(alias)
    quote = conn.ops.quote_name
    key_cols = [quote(c) for c in table.natural_key]
    positions = [table.columns.index(c) for c in table.natural_key]
    selected = ", ".join(["present", *(quote(c) for c in table.columns)])
    last: Sequence[Any] | None = None
    while True:
        sql, params = keyset.page(selected, table_name(table.name), key_cols, last, batch)
        rows = shards.read(alias, sql, params, conn)
        for row in rows:
            yield bool(row[0]), plain_row(row[1:])
        if len(rows) < batch:
            return
        last = [plain_row(rows[-1][1:])[p] for p in positions]

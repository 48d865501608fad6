"""SQLite (the embedded default): its features and statements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .base import Dialect


class SQLite(Dialect):
    name = "SQLite"

    index_writer = False
    driver_route = False
    consistent_snapshot = False
    fence_by_kill = False
    parallel_connections = False
    file_database = True
    named_locks = False
    may_be_galera = False
    replication = False
    relayout = False
    information_schema = False
    version_checked = False
    literal_rows = False
    datetimes_as_text = True
    json_index_rows = False
    json_functions = False
    kill_breaks_triggers = False

    int_type = "INTEGER"
    counter_type = "INTEGER"
    binary16 = "BLOB"
    double = "REAL"
    id_field_type = "blob"
    body_field_type = "blob"

    table_options = ""
    clustered_table_options = " WITHOUT ROWID"
    serial_key = "INTEGER PRIMARY KEY AUTOINCREMENT"
    insert_ignore = "INSERT OR IGNORE"
    insert_or_replace = "INSERT OR REPLACE"
    for_update_skip_locked = ""
    for_update = ""  # the store serializes SQLite's writes
    for_share = ""
    lock_wait_timeout = False
    null_safe_equal = "IS"
    unix_now = "CAST(strftime('%%s', 'now') AS INTEGER)"
    greatest = "MAX"  # with two or more arguments, a scalar function
    begin_snapshot = ("BEGIN",)

    def varbinary(self, length: int) -> str:
        return "BLOB"

    def varchar(self, length: int) -> str:
        return "TEXT"

    def upsert(
        self, quote: Callable[[str], str], keys: Sequence[str], others: Sequence[str]
    ) -> str:
        sets = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in others)
        return f" ON CONFLICT ({', '.join(quote(c) for c in keys)}) DO UPDATE SET {sets}"

    def keep_existing(self, key: str) -> tuple[str, str]:
        return "INSERT OR IGNORE", ""

    def delete_first(self, table: str, where: str, order: str, key: str) -> str:
        # No ORDER BY ... LIMIT on a DELETE (unless SQLite is built with it).
        return (
            f"DELETE FROM {table} WHERE ({key}) IN "
            f"(SELECT {key} FROM {table} WHERE {where} ORDER BY {order} LIMIT %s)"
        )

    def index_table(
        self,
        table: str,
        columns: Sequence[str],
        pk: str,
        entity_key: tuple[str, str],
        unique: tuple[str, str] | None,
    ) -> list[str]:
        body = ",\n  ".join([*columns, f"PRIMARY KEY ({pk})"])
        statements = [
            f"CREATE TABLE IF NOT EXISTS {table} (\n  {body}\n) WITHOUT ROWID",
            f"CREATE INDEX IF NOT EXISTS {entity_key[0]} ON {table} ({entity_key[1]})",
        ]
        if unique is not None:
            statements.append(
                f"CREATE UNIQUE INDEX IF NOT EXISTS {unique[0]} ON {table} ({unique[1]})"
            )
        return statements

    def trigger(self, name: str, event: str, table: str, action: str, handler: str) -> str:
        # No handlers: a trigger is a row of the schema table, dropped with its log at once.
        return f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON {table} BEGIN {action}; END"

    def insert_once(
        self, table: str, columns: Sequence[str], values: Sequence[str], key: Sequence[int]
    ) -> str:
        # Not INSERT OR IGNORE: in a trigger, the firing statement's conflict clause overrides
        # the trigger's (an upsert's makes a duplicate fail it, INSERT OR REPLACE's replaces).
        # Writes are serialized: nothing inserts the key between the check and the insert.
        found = " AND ".join(f"{columns[k]} = {values[k]}" for k in key)
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} "
            f"WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE {found})"
        )

    def declared_columns(self, cursor: Any, table: str) -> dict[str, str]:
        # The declared type decides a column's affinity, so the values are kept alike.
        cursor.execute(f'PRAGMA table_info("{table}")')
        return {str(row[1]): str(row[2]) for row in cursor.fetchall()}

"""Creating and dropping index tables::

index_<name>(<one column per property>, entity_id BINARY(16),
             PRIMARY KEY(<properties>, entity_id), KEY(entity_id) [, UNIQUE(<properties>)])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.db import connections

from ..config.indexes import Index, is_identifier, registry
from ..exceptions import ConfigurationError


def create_statements(index: Index, vendor: str, quote: Callable[[str], str]) -> list[str]:
    """``CREATE TABLE IF NOT EXISTS`` statements for ``index`` on one backend."""
    index.require_valid()
    table = quote(index.name)
    cols = [f"{quote(p)} {index.columns[p].sql_type(vendor)} NOT NULL" for p in index.properties]
    entity_col = "BINARY(16)" if vendor == "mysql" else "BLOB"
    cols.append(f"{quote('entity_id')} {entity_col} NOT NULL")
    pk = ", ".join(quote(c) for c in (*index.properties, "entity_id"))
    key_name = quote(f"{index.name[:48]}_entity")
    props = ", ".join(quote(p) for p in index.properties)
    unique_name = quote(f"{index.name[:48]}_unique")
    if vendor == "mysql":
        keys_sql = [f"PRIMARY KEY ({pk})", f"KEY {key_name} ({quote('entity_id')})"]
        if index.unique:
            keys_sql.append(f"UNIQUE KEY {unique_name} ({props})")
        body = ",\n  ".join([*cols, *keys_sql])
        return [
            f"CREATE TABLE IF NOT EXISTS {table} (\n  {body}\n) "
            "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        ]
    body = ",\n  ".join([*cols, f"PRIMARY KEY ({pk})"])
    statements = [
        f"CREATE TABLE IF NOT EXISTS {table} (\n  {body}\n) WITHOUT ROWID",
        f"CREATE INDEX IF NOT EXISTS {key_name} ON {table} ({quote('entity_id')})",
    ]
    if index.unique:
        statements.append(f"CREATE UNIQUE INDEX IF NOT EXISTS {unique_name} ON {table} ({props})")
    return statements


def create_tables(alias: str, indexes: Iterable[Index] | None = None) -> list[str]:
    """Create the tables of ``indexes`` (default: every valid declared one) on a shard.

    Idempotent (``IF NOT EXISTS``) and instant on an empty table. Returns the names created or
    confirmed.
    """
    conn = connections[alias]
    done = []
    with conn.cursor() as cursor:
        for index in registry.valid() if indexes is None else indexes:
            for statement in create_statements(index, conn.vendor, conn.ops.quote_name):
                cursor.execute(statement)
            done.append(index.name)
    return done


def drop_table(alias: str, name: str) -> None:
    """Drop an index table on one shard (``name`` must be a valid identifier)."""
    if not is_identifier(name):
        raise ConfigurationError(f"{name!r} is not a valid index table name")
    conn = connections[alias]
    with conn.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {conn.ops.quote_name(name)}")

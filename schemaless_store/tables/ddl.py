"""Creating and dropping index tables::

index_<name>(<one column per property>, entity_id BINARY(16),
             PRIMARY KEY(<properties>, entity_id), KEY(entity_id) [, UNIQUE(<properties>)])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.db import connections

from ..config.indexes import Index, is_identifier, registry
from ..exceptions import ConfigurationError
from ..sql import dialects
from ..values.index_values import ColumnType


def create_statements(index: Index, vendor: str, quote: Callable[[str], str]) -> list[str]:
    """``CREATE TABLE IF NOT EXISTS`` statements for ``index`` on one backend."""
    index.require_valid()
    dialect = dialects.for_vendor(vendor)
    cols = [
        f"{quote(p)} {column_type(index.columns[p], vendor)} NOT NULL" for p in index.properties
    ]
    cols.append(f"{quote('entity_id')} {dialect.binary16} NOT NULL")
    pk = ", ".join(quote(c) for c in (*index.properties, "entity_id"))
    props = ", ".join(quote(p) for p in index.properties)
    unique = (quote(f"{index.name[:48]}_unique"), props) if index.unique else None
    entity_key = (quote(f"{index.name[:48]}_entity"), quote("entity_id"))
    return dialect.index_table(quote(index.name), cols, pk, entity_key, unique)


def column_type(column: ColumnType, vendor: str) -> str:
    """A column's SQL type on ``vendor``: its own ``sql_type(vendor)``, if it defines one
    (docs/configuration.md), else how the backend spells its ``storage``."""
    own = getattr(column, "sql_type", None)
    if own is not None:
        return str(own(vendor))
    if not column.storage:
        raise NotImplementedError(f"{column!r} defines neither storage nor sql_type(vendor)")
    return dialects.for_vendor(vendor).column_type(column.storage, column.max_bytes)


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

"""MariaDB (a single server or a Galera node): its features and statements."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings

from .base import Dialect


class MariaDB(Dialect):
    name = "MariaDB"

    index_writer = True
    driver_route = True
    consistent_snapshot = True
    fence_by_kill = True
    parallel_connections = True
    file_database = False
    named_locks = True
    may_be_galera = True
    replication = True
    relayout = True
    information_schema = True
    version_checked = True
    literal_rows = True
    datetimes_as_text = False
    json_index_rows = True
    json_functions = True
    kill_breaks_triggers = True

    int_type = "INT"
    counter_type = "BIGINT"
    binary16 = "BINARY(16)"
    double = "DOUBLE"
    id_field_type = "binary(16)"
    body_field_type = "mediumblob"

    table_options = " ENGINE=InnoDB"
    clustered_table_options = " ENGINE=InnoDB"  # InnoDB clusters every table by its key
    serial_key = "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"
    insert_ignore = "INSERT IGNORE"
    insert_or_replace = "REPLACE"
    for_update_skip_locked = " FOR UPDATE SKIP LOCKED"
    for_update = " FOR UPDATE"
    for_share = " LOCK IN SHARE MODE"
    lock_wait_timeout = True
    null_safe_equal = "<=>"
    unix_now = "UNIX_TIMESTAMP()"
    greatest = "GREATEST"
    begin_snapshot = (
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
    )

    def varbinary(self, length: int) -> str:
        return f"VARBINARY({length})"

    def varchar(self, length: int) -> str:
        return f"VARCHAR({length})"

    def upsert(
        self, quote: Callable[[str], str], keys: Sequence[str], others: Sequence[str]
    ) -> str:
        return " ON DUPLICATE KEY UPDATE " + ", ".join(
            f"{quote(c)} = VALUES({quote(c)})" for c in others
        )

    def keep_existing(self, key: str) -> tuple[str, str]:
        # Not INSERT IGNORE, which turns other errors into warnings too.
        return "INSERT", f" ON DUPLICATE KEY UPDATE {key} = {key}"

    def delete_first(self, table: str, where: str, order: str, key: str) -> str:
        return f"DELETE FROM {table} WHERE {where} ORDER BY {order} LIMIT %s"

    def index_table(
        self,
        table: str,
        columns: Sequence[str],
        pk: str,
        entity_key: tuple[str, str],
        unique: tuple[str, str] | None,
    ) -> list[str]:
        keys = [f"PRIMARY KEY ({pk})", f"KEY {entity_key[0]} ({entity_key[1]})"]
        if unique is not None:
            keys.append(f"UNIQUE KEY {unique[0]} ({unique[1]})")
        body = ",\n  ".join([*columns, *keys])
        return [
            f"CREATE TABLE IF NOT EXISTS {table} (\n  {body}\n) "
            "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        ]

    def trigger(self, name: str, event: str, table: str, action: str, handler: str) -> str:
        return (
            f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON "
            f"{table} FOR EACH ROW BEGIN {handler}; {action}; END"
        )

    def insert_once(
        self, table: str, columns: Sequence[str], values: Sequence[str], key: Sequence[int]
    ) -> str:
        # A duplicate of the clustered key is locked without its gap: no wait on a neighbour.
        return f"INSERT IGNORE INTO {table} ({', '.join(columns)}) VALUES ({', '.join(values)})"

    def declared_columns(self, cursor: Any, table: str) -> dict[str, str]:
        cursor.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            [table],
        )
        return {
            str(name): str(kind)
            + (f" CHARACTER SET {charset} COLLATE {collation}" if charset else "")
            for name, kind, charset, collation in cursor.fetchall()
        }

    def datetime_converter(self, conn: Any) -> Callable[[Any], Any]:
        """Attaching the connection's time zone (``make_aware`` of a naive value, which is all
        Django's ``convert_datetimefield_value`` does here)."""
        # A DATETIME, or its text (UPDATED_TEXT): parsing the text with fromisoformat() costs a
        # fraction of what mysqlclient's DATETIME conversion does.
        parse = dt.datetime.fromisoformat
        if not settings.USE_TZ:
            return lambda value: parse(value) if type(value) is str else value
        zone = conn.timezone
        if zone is dt.UTC:

            def utc(value: Any) -> Any:
                # The zone parsed with the text: a fraction of what replace(tzinfo=) costs.
                if type(value) is str:
                    return parse(value + "+00:00")
                return None if value is None else value.replace(tzinfo=zone)

            return utc
        return lambda value: (
            None
            if value is None
            else (parse(value) if type(value) is str else value).replace(tzinfo=zone)
        )

    def db_datetime(self, conn: Any, value: Any) -> Any:
        """What ``adapt_datetimefield_value`` gives, without its checks (it runs on every put)."""
        return str(
            value.astimezone(conn.timezone).replace(tzinfo=None) if settings.USE_TZ else value
        )

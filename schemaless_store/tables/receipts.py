"""Write receipts (docs/design.md#receipts): one row per write transaction of the store, on the
shard that ran it, inserted *in that transaction*::

    schemaless_receipts(created BIGINT,          -- Unix seconds, chosen by the writer
                        write_id BINARY(16),     -- the write's random id
                        result VARCHAR(255),     -- what a retry returns (JSON)
                        PRIMARY KEY (created, write_id))

Clustered by time: inserts land at the right edge of the one B-tree (no secondary index to
keep), the retention's removal walks its left edge, and a lookup, which knows the ``created``
its write chose, is one primary-key descent.

A row exists exactly when the write committed. After a commit whose answer was lost, the retry
reads the row (:func:`find`) on the same shard: present, the write landed and its recorded
result is the answer; absent, it did not, and running it again is safe. Rows older than
``SCHEMALESS["RECEIPT_RETENTION"]`` are removed in bounded batches by the writers
(:func:`remove_expired`). Created by ``post_migrate`` on every shard, as the bucket table is;
bucket moves do not copy it (a retry asks the server its commit went to).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from ..topology import shards
from . import sessions

TABLE = "schemaless_receipts"
# The most rows one removal deletes: a short statement however far behind the removal is.
REMOVE_BATCH = 1000
_MYSQL_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (created BIGINT NOT NULL, "
    "write_id BINARY(16) NOT NULL, result VARCHAR(255) NOT NULL, "
    "PRIMARY KEY (created, write_id)) ENGINE=InnoDB"
)
_SQLITE_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (created BIGINT NOT NULL, write_id BLOB NOT NULL, "
    "result TEXT NOT NULL, PRIMARY KEY (created, write_id)) WITHOUT ROWID",
)
INSERT = f"INSERT INTO {TABLE} (write_id, created, result) VALUES (%s, %s, %s)"
# The receipt and the commit in one round trip (a multi-statement query; the driver's
# connections allow them): a receipt costs a write no extra round trip.
_INSERT_AND_COMMIT = INSERT + "; COMMIT"
# A locking read: a commit of this very write still under way on the server (its answer lost
# on the way, its session not yet ended) holds the row's insert lock, so the read waits for
# its outcome instead of seeing "absent" too early.
_FIND = f"SELECT result FROM {TABLE} WHERE created = %s AND write_id = %s"
_FIND_LOCKED = _FIND + " LOCK IN SHARE MODE"
_REMOVE_MYSQL = f"DELETE FROM {TABLE} WHERE created < %s ORDER BY created LIMIT %s"
_REMOVE_SQLITE = (
    f"DELETE FROM {TABLE} WHERE (created, write_id) IN "
    f"(SELECT created, write_id FROM {TABLE} WHERE created < %s ORDER BY created LIMIT %s)"
)


def create_table(alias: str) -> None:
    """Create the receipts table on a shard (idempotent)."""
    conn = shards.connection(alias)
    statements = (_MYSQL_DDL,) if conn.vendor == "mysql" else _SQLITE_DDL
    with conn.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def encode(result: dict[str, int]) -> str:
    return json.dumps(result, separators=(",", ":"))


def record(cursor: Any, write_id: bytes, created: int, result: dict[str, int]) -> None:
    """Insert a write's receipt (inside the write's own transaction)."""
    cursor.execute(INSERT, [write_id, created, encode(result)])


def record_and_commit(driver: Any, write_id: bytes, created: int, result: dict[str, int]) -> None:
    """Insert a write's receipt and commit its transaction, in one round trip on the driver's
    connection ``driver`` (MySQL's ``BEGIN`` ... ``COMMIT`` route of the protocol). An error
    of either statement raises (the ``COMMIT`` is not run after a failed ``INSERT``)."""
    cursor = driver.cursor()
    try:
        cursor.execute(_INSERT_AND_COMMIT, [write_id, created, encode(result)])
        while cursor.nextset() is not None:  # the COMMIT's answer (its error, if any)
            pass
    finally:
        cursor.close()


def find(alias: str, write_id: bytes, created: int, *, galera: bool) -> dict[str, int] | None:
    """The recorded result of write ``write_id`` (whose receipt said ``created``) on
    ``alias``, or None if it did not commit there. Reads on the connection of ``alias`` (a
    fresh one after a loss), in a transaction of its own; on Galera with the node caught up
    with the cluster (``wsrep_sync_wait``) first."""
    conn = shards.connection(alias)
    locked = conn.vendor == "mysql"
    with shards.errors_named(alias), transaction.atomic(using=alias), conn.cursor() as cursor:
        if galera:
            sessions.apply_first(cursor)
        try:
            cursor.execute(_FIND_LOCKED if locked else _FIND, [created, write_id])
            row = cursor.fetchone()
        finally:
            if galera:
                cursor.execute("SET SESSION wsrep_sync_wait = 0")
    if row is None:
        return None
    found: dict[str, int] = json.loads(row[0])
    return found


def remove_expired(alias: str, before: int, limit: int = REMOVE_BATCH) -> int:
    """Delete up to ``limit`` receipts created before ``before`` (Unix seconds), oldest
    first, in one autocommitted statement; returns how many."""
    conn = shards.connection(alias)
    statement = _REMOVE_MYSQL if conn.vendor == "mysql" else _REMOVE_SQLITE
    with shards.errors_named(alias), conn.cursor() as cursor:
        cursor.execute(statement, [before, limit])
        return int(cursor.rowcount)


def count(alias: str) -> int:
    """How many receipts ``alias`` holds (a full count: for the bench and tests)."""
    return int(shards.read(alias, f"SELECT COUNT(*) FROM {TABLE}", [])[0][0])

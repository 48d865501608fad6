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
import math
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from ..sql import dialects, sessions
from ..topology import shards

TABLE = "schemaless_receipts"
# The most rows one removal deletes: a short statement however far behind the removal is.
REMOVE_BATCH = 1000
_INSERT_HEAD = f"INSERT INTO {TABLE} (write_id, created, result) VALUES "
INSERT = _INSERT_HEAD + "(%s, %s, %s)"
# A locking read: a commit of this very write still under way on the server (its answer lost
# on the way, its session not yet ended) holds the row's insert lock, so the read waits for
# its outcome instead of seeing "absent" too early.
_FIND = f"SELECT result FROM {TABLE} WHERE created = %s AND write_id = %s"


def create_table(alias: str) -> None:
    """Create the receipts table on a shard (idempotent)."""
    conn = shards.connection(alias)
    with conn.cursor() as cursor:
        cursor.execute(create_statement(dialects.of(conn)))


def create_statement(dialect: dialects.Dialect) -> str:
    """The receipts table's ``CREATE TABLE IF NOT EXISTS`` on ``dialect``'s servers."""
    return (
        f"CREATE TABLE IF NOT EXISTS {TABLE} (created BIGINT NOT NULL, "
        f"write_id {dialect.binary16} NOT NULL, result {dialect.varchar(255)} NOT NULL, "
        f"PRIMARY KEY (created, write_id)){dialect.clustered_table_options}"
    )


def encode(result: dict[str, Any]) -> str:
    return json.dumps(result, separators=(",", ":"))


def record(cursor: Any, write_id: bytes, created: int, result: dict[str, int]) -> None:
    """Insert a write's receipt (inside the write's own transaction)."""
    cursor.execute(INSERT, [write_id, created, encode(result)])


# A receipt's result value the server fills in, in the same query: the ``added_id`` of the
# entity ``INSERT``, which :data:`KEEP_ADDED_ID` keeps in a session variable (a later
# ``INSERT`` of a history version changes ``LAST_INSERT_ID()``), written into the receipt by
# an ``UPDATE`` before the ``COMMIT`` (the receipt itself goes first: :func:`commit_batch`).
class _AddedId:
    def __repr__(self) -> str:
        return "ADDED_ID"


ADDED_ID: Any = _AddedId()
KEEP_ADDED_ID = b"SET @schemaless_added_id = LAST_INSERT_ID()"
_MARK = "\x00"  # stands for ADDED_ID in the encoded JSON: never in an int or a key


def _result_literal(driver: Any, result: dict[str, Any]) -> bytes:
    """The receipt's ``result`` as an SQL expression: a string literal, or a ``CONCAT`` that
    puts the session's ``@schemaless_added_id`` where ``result`` holds :data:`ADDED_ID`."""
    text = encode({key: _MARK if value is ADDED_ID else value for key, value in result.items()})
    parts = text.split(json.dumps(_MARK))
    if len(parts) == 1:
        return bytes(driver.literal(text))
    joined = b", @schemaless_added_id, ".join(bytes(driver.literal(part)) for part in parts)
    return b"CONCAT(" + joined + b")"


def _receipt_statements(
    driver: Any, write_id: bytes, created: int, result: dict[str, Any]
) -> tuple[bytes, bytes | None]:
    """The receipt's ``INSERT`` (first in the batch: its row lock stands for the batch while
    it runs) and, when ``result`` holds :data:`ADDED_ID`, the ``UPDATE`` that fills it in
    after the statements (``None`` otherwise): until then the row holds 0 there, which no one
    reads (the transaction commits it filled in, or not at all)."""
    key = (driver.literal(created), driver.literal(write_id))
    filled = _result_literal(driver, result)
    placeholder = {key_: 0 if value is ADDED_ID else value for key_, value in result.items()}
    value = filled if placeholder == result else bytes(driver.literal(encode(placeholder)))
    insert = _INSERT_HEAD.encode() + b"(%s, %s, %s)" % (key[1], key[0], value)
    if value is filled:
        return insert, None
    update = f"UPDATE {TABLE} SET result = ".encode() + filled
    return insert, update + b" WHERE created = %s AND write_id = %s" % key


def commit_batch(
    driver: Any,
    statements: Sequence[bytes],
    receipt: tuple[bytes, int, dict[str, Any]] | None,
    *,
    begin: bool,
) -> list[tuple[int, int, tuple[Any, ...]]]:
    """Send the receipt ``(write_id, created, result)`` if any, ``statements`` (rendered, the
    transaction's last) and ``COMMIT`` in one round trip on the driver's connection ``driver``
    (a multi-statement query; ``begin``: ``BEGIN`` first, the whole transaction in it).
    Returns each of ``statements``' ``(lastrowid, rowcount, rows)`` (``rows``: what a
    ``SELECT`` among them answered, else empty).

    A statement here may wait on a row lock, and if the answer is lost meanwhile (the
    client's ``read_timeout``) the server runs on and may commit: the retry rule ends this
    session before it reads the receipt (docs/design.md#receipts). The receipt goes first,
    so a read that meets its uncommitted row waits for the outcome too.

    The server runs the statements in order and stops at the first that fails: its error
    raises here, and neither the later statements nor the ``COMMIT`` ran (the caller rolls the
    open transaction back). A lost answer leaves the outcome to the receipt."""
    sent = [b"BEGIN"] if begin else []
    fill: bytes | None = None
    if receipt is not None:
        insert, fill = _receipt_statements(driver, *receipt)
        sent.append(insert)
    first = len(sent)
    sent.extend(statements)
    if fill is not None:
        sent.append(fill)
    sent.append(b"COMMIT")
    outcomes: list[tuple[int, int, tuple[Any, ...]]] = []
    cursor = driver.cursor()
    try:
        cursor.execute(b";".join(sent))
        outcomes.append(_outcome(cursor))
        while cursor.nextset() is not None:  # each statement's answer (an error raises here)
            outcomes.append(_outcome(cursor))
    finally:
        cursor.close()
    return outcomes[first : first + len(statements)]


def _outcome(cursor: Any) -> tuple[int, int, tuple[Any, ...]]:
    rows = tuple(cursor.fetchall()) if cursor.description is not None else ()
    return int(cursor.lastrowid or 0), int(cursor.rowcount), rows


def render(driver: Any, sql: str, params: Sequence[Any]) -> bytes:
    """``sql`` with ``params`` as the driver's literals (for :func:`commit_batch`)."""
    return sql.encode() % tuple(bytes(driver.literal(param)) for param in params)


def find(alias: str, write_id: bytes, created: int, *, galera: bool) -> dict[str, int] | None:
    """The recorded result of write ``write_id`` (whose receipt said ``created``) on
    ``alias``, or None if it did not commit there. Reads on the connection of ``alias`` (a
    fresh one after a loss), in a transaction of its own; on Galera with the node caught up
    with the cluster (``wsrep_sync_wait``) first."""
    conn = shards.connection(alias)
    find = _FIND + dialects.of(conn).for_share
    with shards.errors_named(alias), transaction.atomic(using=alias), conn.cursor() as cursor:
        if galera:
            sessions.apply_first(cursor)
        try:
            cursor.execute(find, [created, write_id])
            row = cursor.fetchone()
        finally:
            if galera:
                cursor.execute("SET SESSION wsrep_sync_wait = 0")
    if row is None:
        return None
    found: dict[str, int] = json.loads(row[0])
    return found


def remove_expired(alias: str, retention: float, limit: int = REMOVE_BATCH) -> int:
    """Delete up to ``limit`` receipts more than ``retention`` seconds old by the shard's
    clock, oldest first, in one autocommitted statement; returns how many."""
    conn = shards.connection(alias)
    dialect = dialects.of(conn)
    # Judged by the shard's clock, never a process's own (docs/design.md#receipts).
    statement = dialect.delete_first(
        TABLE, f"created < {dialect.unix_now} - %s", "created", "created, write_id"
    )
    with shards.errors_named(alias), conn.cursor() as cursor:
        cursor.execute(statement, [math.ceil(retention), limit])
        return int(cursor.rowcount)


def age(alias: str, created: int) -> int:
    """Seconds since ``created`` by the shard's clock (read after a :func:`find`, so that a
    removal the find missed was judged against an earlier time of the same clock)."""
    now = dialects.of(shards.connection(alias)).unix_now
    return int(shards.read(alias, f"SELECT {now} - %s", [created])[0][0])


def count(alias: str) -> int:
    """How many receipts ``alias`` holds (a full count: for the bench and tests)."""
    return int(shards.read(alias, f"SELECT COUNT(*) FROM {TABLE}", [])[0][0])

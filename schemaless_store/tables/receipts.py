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
result is the answer; absent, it did not, and running it again is safe, unless the row may
have been removed. Rows older than ``SCHEMALESS["RECEIPT_RETENTION"]`` are removed in bounded
batches by the writers (:func:`remove_expired`), and every removal first raises the shard's
**pruned line**, one row of its own table, in the same transaction::

    schemaless_receipt_horizon(id INT PRIMARY KEY,   -- 0, the one row
                               pruned BIGINT)        -- receipts created at or below it
                                                     -- may have been removed

A removal deletes only receipts at or below the line, so "absent" with a ``created`` above it
is proof whatever retention the pruning process had; :func:`find` reads both in one statement.
Both tables are created by ``post_migrate`` on every shard, as the bucket table is (existing
stores get the line at their next ``migrate``); bucket moves do not copy them (a retry asks
the server its commit went to).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from django.db import transaction

from ..config import conf
from ..sql import dialects, literals, sessions
from ..sql.server_errors import no_table
from ..topology import shards

TABLE = "schemaless_receipts"
# The most rows one removal deletes: a short statement however far behind the removal is.
REMOVE_BATCH = 1000
_INSERT_HEAD = f"INSERT INTO {TABLE} (write_id, created, result) VALUES "
INSERT = _INSERT_HEAD + "(%s, %s, %s)"
HORIZON = "schemaless_receipt_horizon"
# How far back by the shard's clock a new line starts, on a shard that has had receipts
# without one: a pruner of any version removes only receipts older than the lowest
# retention it takes (conf.RULES) by the shard's clock, so none above this was removed
# (a Galera node's clock ahead by up to the margin included).
_FIRST_LINE = int(conf.RULES["RECEIPT_RETENTION"].low) + 1 - int(conf.RECEIPT_MARGIN)
# A locking read of the line, then of the receipt (the outer table of the join is read
# first, as a removal takes them). A commit of this very write still under way on the server
# (its answer lost on the way, its session not yet ended) holds the receipt row's insert
# lock, so the read waits for its outcome instead of seeing "absent" too early; a removal
# under way holds the line's row, so the read sees both its line and its deletions, or
# neither.
_FIND = (
    f"SELECT h.pruned, r.result FROM {HORIZON} h LEFT JOIN {TABLE} r "
    "ON r.created = %s AND r.write_id = %s WHERE h.id = 0"
)
_FIND_ALONE = f"SELECT result FROM {TABLE} WHERE created = %s AND write_id = %s"


class Lookup(NamedTuple):
    """What a retry's read (:func:`find`) found on a shard."""

    result: dict[str, int] | None  # the write's recorded result; None: no receipt
    # Receipts created at or below this may have been removed; None: the shard has no line
    # (its table or row missing: ``migrate`` makes them).
    pruned: int | None


def create_table(alias: str) -> None:
    """Create the receipts table and the pruned line's on a shard (idempotent; a store that
    has receipts but no line yet gets it here, starting :data:`_FIRST_LINE` seconds ago by
    the shard's clock)."""
    conn = shards.connection(alias)
    dialect = dialects.of(conn)
    with conn.cursor() as cursor:
        cursor.execute(create_statement(dialect))
        for sql, params in horizon_statements(dialect):
            cursor.execute(sql, params)


def horizon_statements(dialect: dialects.Dialect) -> list[tuple[str, list[Any]]]:
    """The line's table and its row, if missing, on ``dialect``'s servers."""
    return [
        (
            f"CREATE TABLE IF NOT EXISTS {HORIZON} (id INT NOT NULL PRIMARY KEY, "
            f"pruned {dialect.counter_type} NOT NULL){dialect.table_options}",
            [],
        ),
        (
            f"{dialect.insert_ignore} INTO {HORIZON} (id, pruned) "
            f"VALUES (0, {dialect.unix_now} - %s)",
            [_FIRST_LINE],
        ),
    ]


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
# an ``UPDATE`` before the ``COMMIT`` (the receipt itself goes first in the batch:
# :func:`commit_batch`). A new row that implies index rows is inserted a round trip earlier,
# before them (..tables.entities.insert_now keeps the variable then).
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
    session before it reads the receipt (docs/design.md#receipts). The receipt goes first in
    the batch, so a read that meets its uncommitted row waits for the outcome too (statements
    sent before the batch in the same transaction, a new row's early ``INSERT``, are rolled
    back with it when that session ends).

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
    # The driver's own calls, without a cursor: the statements are rendered already, and a
    # cursor's layers cost more client time than the answers they read (issue 45, item 5).
    outcomes: list[tuple[int, int, tuple[Any, ...]]] = []
    try:
        driver.query(b";".join(sent))
        while True:
            answer = driver.store_result()  # None for a statement that returns no rows
            rows = () if answer is None else tuple(answer.fetch_row(0))
            outcomes.append((int(driver.insert_id()), int(driver.affected_rows()), rows))
            if driver.next_result() != 0:  # -1: no more answers (an error raises here)
                break
    except driver.Error:
        # The server's error ends the batch: it sent no answer after it (nothing to read).
        raise
    except BaseException:
        # An interrupt as a round trip returned (Ctrl-C, a signal handler's exception): the
        # batch's later answers, its COMMIT's among them, are read first, as closing a cursor
        # does, so the batch has ended on the server before the write undoes or invalidates
        # anything. A session that cannot be read to its end is out of step: closed.
        if not sessions.read_to_the_end(driver):
            with contextlib.suppress(Exception):
                driver.close()
        raise
    return outcomes[first : first + len(statements)]


def find(alias: str, write_id: bytes, created: int, *, galera: bool) -> Lookup:
    """The recorded result of write ``write_id`` (whose receipt said ``created``) on
    ``alias``, or None if no receipt is there, with the shard's pruned line, read in one
    statement. Reads on the connection of ``alias`` (a fresh one after a loss), in a
    transaction of its own; on Galera with the node caught up with the cluster
    (``wsrep_sync_wait``, for this read alone: the session's own setting, which a
    deployment's ``init_command`` may have made 1, is left as it was). A shard whose line is
    not made yet (``migrate`` not run since the upgrade) is read for the receipt alone: a
    receipt found says the write landed; none found is judged with no line."""
    conn = shards.connection(alias)
    find = _FIND + dialects.of(conn).for_share
    if galera:
        find = sessions.applied_first(find)
    with shards.errors_named(alias), transaction.atomic(using=alias), conn.cursor() as cursor:
        try:
            cursor.execute(find, [created, write_id])
            row = cursor.fetchone()
        except Exception as exc:
            if not no_table(exc):
                raise
            # A store from before the line, not migrated since: the receipt alone.
            alone = _FIND_ALONE + dialects.of(conn).for_share
            cursor.execute(sessions.applied_first(alone) if galera else alone, [created, write_id])
            found = cursor.fetchone()
            row = None if found is None else (None, found[0])
    if row is None:
        return Lookup(None, None)
    pruned = None if row[0] is None else int(row[0])
    return Lookup(None if row[1] is None else json.loads(row[1]), pruned)


def remove_expired(
    alias: str, retention: float, limit: int = REMOVE_BATCH, *, galera: bool = False
) -> int:
    """Raise the pruned line of ``alias`` to the receipts more than ``retention`` seconds old
    by the shard's clock (never lower it), then delete up to ``limit`` of those receipts,
    oldest first, none above the line, in one transaction; returns how many were deleted.

    On MariaDB (not Galera) it is one round trip: ``BEGIN``, both statements and ``COMMIT``
    in one query. On a Galera node (where a ``COMMIT`` in such a query may answer for a
    transaction rolled back, the later statements then running outside it) and on SQLite:
    a transaction of its own."""
    conn = shards.connection(alias)
    dialect = dialects.of(conn)
    steps = prune_steps(dialect, retention, limit)
    one_query = dialect.driver_route and not (galera or conn.in_atomic_block or conn.queries_logged)
    with shards.errors_named(alias):
        if one_query:
            return _remove_in_one_query(conn, steps)
        with transaction.atomic(using=alias), conn.cursor() as cursor:
            for sql, params in steps:
                cursor.execute(sql, params)
            return int(cursor.rowcount)


def prune_steps(
    dialect: dialects.Dialect, retention: float, limit: int
) -> list[tuple[str, list[Any]]]:
    """A removal's two statements with their parameters, in order (:func:`remove_expired`)."""
    # Judged by the shard's clock, never a process's own (docs/design.md#receipts): older than
    # ceil(retention) seconds, that is at or below now - ceil - 1. The DELETE reads the clock
    # again, maybe a second later, so it also stays at or below the line it raised; and under
    # a line another process raised higher (a shorter retention) it keeps what its own
    # retention keeps, which a retry can still find.
    cut = f"{dialect.unix_now} - %s"
    raise_line = f"UPDATE {HORIZON} SET pruned = {dialect.greatest}(pruned, {cut}) WHERE id = 0"
    below = f"created <= {cut} AND created <= (SELECT pruned FROM {HORIZON} WHERE id = 0)"
    delete = dialect.delete_first(TABLE, below, "created", "created, write_id")
    age = math.ceil(retention) + 1
    return [(raise_line, [age]), (delete, [age, limit])]


def _remove_in_one_query(conn: Any, steps: list[tuple[str, list[Any]]]) -> int:
    """``steps`` in one transaction sent as one query on the driver's connection of ``conn``
    (as a write's ``_DriverTransaction`` commits); the last one's row count."""
    conn.validate_thread_sharing()
    conn.ensure_connection()
    with conn.wrap_database_errors:
        driver = conn.connection
        sessions.allow_many_statements(driver)
        rendered = [literals.statement(driver, sql, params) for sql, params in steps]
        try:
            outcomes = commit_batch(driver, rendered, None, begin=True)
        except Exception:
            with contextlib.suppress(Exception):
                driver.rollback()  # a failed statement left the transaction open
            raise
    return outcomes[-1][1]


def age(alias: str, created: int) -> int:
    """Seconds since ``created`` by the shard's clock (read after a :func:`find`, so that a
    removal the find missed was judged against an earlier time of the same clock)."""
    now = dialects.of(shards.connection(alias)).unix_now
    return int(shards.read(alias, f"SELECT {now} - %s", [created])[0][0])


def count(alias: str) -> int:
    """How many receipts ``alias`` holds (a full count: for the bench and tests)."""
    return int(shards.read(alias, f"SELECT COUNT(*) FROM {TABLE}", [])[0][0])


def pruned(alias: str) -> int | None:
    """The pruned line of ``alias`` (None: it has none yet)."""
    rows = shards.read(alias, f"SELECT pruned FROM {HORIZON} WHERE id = 0", [])
    return int(rows[0][0]) if rows else None

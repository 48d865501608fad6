"""What the store asks of a kind of server, written once: :class:`Dialect`.

As Django keeps a backend's differences in its ``features`` and ``operations``, the store keeps
its own in one object per backend (:mod:`.mariadb`, :mod:`.sqlite`). The paths ask it what a
server can do (a feature, named for what it means) or how a statement is spelled there; they do
not branch on ``connection.vendor``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class Dialect:
    """One kind of server. Every attribute is set by each backend's subclass."""

    name: str

    # --- features ----------------------------------------------------------------------------
    # Index rows are written on an autocommit connection of their own, so an entity transaction
    # never holds index locks while it waits on another server (SQLite: one writer per file).
    index_writer: bool
    # The hot paths may use the driver's own cursor and send several statements in one query.
    driver_route: bool
    # A read-only transaction can see the whole database as of one instant.
    consistent_snapshot: bool
    # A move's fence ends the sessions that may still believe a bucket is served; a writer
    # checks buckets against its connection's snapshot of the bucket table, in the client.
    # Without it (SQLite) the bucket table is read inside the write's own transaction.
    fence_by_kill: bool
    # Connections to it work in parallel (threads reading or copying at once).
    parallel_connections: bool
    # The database is a file on this machine, whose writes the store serializes with its own
    # lock (a file lock beside it).
    file_database: bool
    # Background workers lock a server with named locks on it (``GET_LOCK``, or Galera's lease).
    named_locks: bool
    # The server may be a Galera node (it has ``wsrep_*`` variables to ask).
    may_be_galera: bool
    # Replicas follow it by GTID (read-your-writes).
    replication: bool
    # ``entities`` is clustered by its primary key, which an online ``ALTER`` can change
    # (``clusterentities``); without it the table keeps its one layout.
    relayout: bool
    # ``information_schema`` lists its tables' row estimates and its triggers.
    information_schema: bool
    # The server is checked as it connects (MariaDB 10.11+, check ``schemaless.E007``).
    version_checked: bool
    # Rows are sent as typed literals (:mod:`..literals`), not bound by the driver.
    literal_rows: bool
    # Datetimes are stored as text: written as Django's backend writes them.
    datetimes_as_text: bool
    # JSON functions (JSON_VALUE, JSON_EXTRACT, JSON_TYPE, JSON_VALID) and INSERT ... SELECT
    # read at READ COMMITTED without locking the rows read: the cleaner lets the server
    # compute index rows from JSON bodies (tables/json_index.py).
    json_index_rows: bool
    # A query's re-check runs on the server for JSON bodies (JSON_TYPE, JSON_VALUE, ...:
    # tables/rechecks.py); without it Python re-checks every entity.
    json_functions: bool
    # A table's triggers are parsed into the server's cached table objects, and a KILL that
    # lands while a session parses them leaves one that fails every write to the table
    # ("Trigger ... has an error in its body") until the table is reopened (MariaDB 10.11:
    # tables/trigger_reload.py).
    kill_breaks_triggers: bool

    # --- column types --------------------------------------------------------------------------
    int_type: str  # a small integer (a bucket, a state); SQLite: a rowid key
    counter_type: str  # a 64-bit counter
    binary16: str  # an id
    double: str
    # Django fields: an id, an entity's body (up to 16 MiB - 1 on MariaDB)
    id_field_type: str
    body_field_type: str

    # --- statements --------------------------------------------------------------------------
    table_options: str  # after a ``CREATE TABLE``'s columns
    clustered_table_options: str  # the same, for a table stored in its primary key's order
    serial_key: str  # an auto-incremented 64-bit primary key column
    insert_ignore: str  # the verb of an insert that leaves a row whose key is there
    insert_or_replace: str  # the verb of an insert that replaces it
    for_update: str  # after a locking read's ``SELECT`` (nothing where writes are serialized)
    for_update_skip_locked: str  # the same, passing over rows another transaction holds
    for_share: str  # after a shared-lock read's ``SELECT``
    # The server waits this long for a row lock, and says so (``innodb_lock_wait_timeout``).
    lock_wait_timeout: bool
    null_safe_equal: str  # ``a <op> b`` true when both are NULL, or equal
    unix_now: str  # the server's clock in whole Unix seconds (``%`` doubled, for a cursor)
    greatest: str  # the scalar function of the larger of its arguments
    begin_snapshot: tuple[str, ...]  # a transaction that reads as of now

    def varbinary(self, length: int) -> str:
        raise NotImplementedError

    def varchar(self, length: int) -> str:
        raise NotImplementedError

    def column_type(self, storage: str, max_bytes: int) -> str:
        """An index column's SQL type, from its column type's ``storage``."""
        if storage == "bytes":
            return self.varbinary(max_bytes)
        return {"int64": "BIGINT", "float64": self.double, "uuid": self.binary16}[storage]

    def upsert(
        self, quote: Callable[[str], str], keys: Sequence[str], others: Sequence[str]
    ) -> str:
        """The tail of an ``INSERT`` that updates ``others`` of a row whose ``keys`` exist."""
        raise NotImplementedError

    def keep_existing(self, key: str) -> tuple[str, str]:
        """``(verb, tail)`` of an ``INSERT`` that leaves a row whose key is there already
        (only a duplicate key is ignored); ``key`` is a column of it."""
        raise NotImplementedError

    def delete_first(self, table: str, where: str, order: str, key: str) -> str:
        """``DELETE`` the first ``%s`` rows of ``table`` by ``order`` that meet ``where``
        (``key``: the primary key's columns)."""
        raise NotImplementedError

    def index_table(
        self,
        table: str,
        columns: Sequence[str],
        pk: str,
        entity_key: tuple[str, str],
        unique: tuple[str, str] | None,
    ) -> list[str]:
        """``CREATE TABLE IF NOT EXISTS`` an index table: ``columns`` declared, ``pk`` its
        primary key, ``entity_key`` ``(name, column)`` a key on the entity id, ``unique``
        ``(name, columns)`` a unique key, if any (names and columns quoted)."""
        raise NotImplementedError

    def trigger(self, name: str, event: str, table: str, action: str, handler: str) -> str:
        """``CREATE TRIGGER IF NOT EXISTS`` ``name`` running ``action`` after ``event`` on each
        row, with ``handler`` declared first where the server has handlers."""
        raise NotImplementedError

    def insert_once(
        self, table: str, columns: Sequence[str], values: Sequence[str], key: Sequence[int]
    ) -> str:
        """An ``INSERT`` of one row (``values``: expressions) into ``table`` that inserts
        nothing when a row with the same primary key (the ``key`` positions of ``columns``)
        is there, whatever statement fires the trigger it runs in."""
        raise NotImplementedError

    def declared_columns(self, cursor: Any, table: str) -> dict[str, str]:
        """Each column of ``table`` (a valid identifier) as its ``CREATE TABLE`` declares it
        on this server, without ``NULL``/``NOT NULL`` (``name: type``): a table of the same
        columns stores the same values the same way."""
        raise NotImplementedError

    # --- values --------------------------------------------------------------------------------
    def datetime_converter(self, conn: Any) -> Callable[[Any], Any]:
        """What turns a ``DATETIME`` column into the model's value, as Django's backend does."""
        ops = conn.ops
        # Every backend's operations define it; their base class does not.
        convert = ops.convert_datetimefield_value
        return lambda value: convert(value, None, conn)

    def db_datetime(self, conn: Any, value: Any) -> Any:
        """An aware datetime as a ``DATETIME`` parameter of ``conn``."""
        return conn.ops.adapt_datetimefield_value(value)

    def __repr__(self) -> str:
        return f"<dialect {self.name}>"

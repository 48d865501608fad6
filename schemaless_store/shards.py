"""Shards: which alias owns a key, the connections writes use, and what a failure means.

Two connections per shard and thread are used on MySQL: Django's own, which carries the entity
transaction (it holds entity row locks), and an *index writer* in autocommit mode for index rows.
An entity transaction therefore never holds index-table locks while it waits on another server,
so writers on different servers cannot deadlock across servers. SQLite cannot open a second
writer on a file that has a write transaction, so there index rows use Django's connection and
all writes to SQLite shards are serialized by a store-wide lock (SQLite has one writer anyway).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from django.core.signals import request_finished
from django.db import DatabaseError, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from . import bucket_map, conf
from .exceptions import ConfigurationError, NotOwner, ShardUnavailable
from .keys import bucket_of
from .tables import sessions
from .write_lock import write_lock  # noqa: F401 - the store's writes take it as shards.write_lock

T = TypeVar("T")
logger = logging.getLogger(__name__)

# MySQL/MariaDB client and server error codes that mean "the server is not there".
CONNECTION_LOST = {2002, 2003, 2005, 2006, 2013, 2055, 1927, 4031}
# ... of those, the ones where an open connection went away (killed by a move's fence, the
# server restarted or failed over), rather than a new one refused.
OPEN_CONNECTION_LOST = {2006, 2013, 2055, 1927, 4031}
# ... and those that mean "try the transaction again".
RETRYABLE = {1205, 1213}


def shard_aliases() -> tuple[str, ...]:
    return conf.get().shards


def resolve_aliases(aliases: Sequence[str] | None) -> list[str]:
    """The shard aliases named (each checked, repeats dropped, order kept), or every shard's."""
    if aliases is None:
        return list(shard_aliases())
    for alias in aliases:
        check_alias(alias)
    return list(dict.fromkeys(aliases))


def alias_for(key: bytes) -> str:
    """The alias whose buckets include this key (an entity id, or an encoded ``shard_on`` value),
    by this process's copy of the map (:mod:`.bucket_map`)."""
    found = bucket_map.current()
    return found.owners[bucket_of(key, found.buckets)]


def bucket_for(key: bytes) -> int:
    return bucket_of(key, conf.get().buckets)


def await_new_owner(alias: str, buckets: set[int]) -> None:
    """After ``alias`` refused a write for ``buckets``: read the map again until it names
    another owner for all of them (a move flipping them finishes), for at most
    ``SCHEMALESS["MOVE_WAIT"]`` seconds; then :class:`NotOwner`."""
    deadline = time.monotonic() + conf.get().move_wait
    pause = 0.005
    while True:
        found = bucket_map.refresh()
        if all(found.owners[number] != alias for number in buckets):
            return
        if time.monotonic() >= deadline:
            raise NotOwner(alias, buckets)
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def check_alias(alias: str) -> str:
    if alias not in conf.get().shards:
        raise ConfigurationError(
            f"{alias!r} is not a shard alias; shards: {list(conf.get().shards)}"
        )
    return alias


def connection(alias: str) -> BaseDatabaseWrapper:
    """Django's connection for a shard (carries entity transactions and reads)."""
    return connections[alias]


def open_connections() -> list[BaseDatabaseWrapper]:
    """This thread's open connections: Django's and the index writers."""
    found = [c for c in connections.all(initialized_only=True) if c.connection is not None]
    writers = _local.__dict__.get("index_writers", {}).values()
    found.extend(w for w in writers if w.connection is not None)
    return found


def probe_latency(aliases: Iterable[str]) -> float:
    """The slowest round trip, in seconds, of a trivial statement (``SELECT 1``) to the servers
    of ``aliases``: how busy they are, for the throttle of background work (:mod:`.throttle`).
    On SQLite there is no server, and the probe is always quick."""
    slowest = 0.0
    for alias in aliases:
        began = time.perf_counter()
        # errors_named: a connection the fence killed is dropped, and the next probe reconnects.
        with errors_named(alias), connections[alias].cursor() as cursor:
            sessions.ping(cursor)
        slowest = max(slowest, time.perf_counter() - began)
    return slowest


# (alias, database) -> (a Galera node?, its wsrep_max_ws_rows or None): read once per process.
_galera: dict[tuple[str, str], tuple[bool, int | None]] = {}


def _galera_of(alias: str) -> tuple[bool, int | None]:
    conn = connections[alias]
    key = (alias, str(conn.settings_dict.get("NAME")))
    if key not in _galera:
        found: tuple[bool, int | None] = (False, None)
        if conn.vendor == "mysql":
            try:
                with errors_named(alias), conn.cursor() as cursor:
                    on, rows = sessions.galera_settings(cursor)
                if str(on).upper() in ("1", "ON"):
                    found = (True, int(rows) if int(rows) > 0 else None)
            except DatabaseError:  # no wsrep variables: not a Galera build
                pass
        _galera[key] = found
    return _galera[key]


def is_galera(alias: str) -> bool:
    """Whether ``alias``'s server is a Galera node (``@@wsrep_on``): row locks are then one
    node's, and the write protocol's step 5 makes its re-check certified (docs/replicas.md)."""
    return _galera_of(alias)[0]


def write_set_limit(alias: str) -> int | None:
    """The most rows one transaction may write on ``alias``'s server: Galera's
    ``wsrep_max_ws_rows`` when the server is a Galera node with a limit set, else None. The
    cleaner's and the mover's batches stay under it (docs/replicas.md, "Galera")."""
    return _galera_of(alias)[1]


def vendor(alias: str) -> str:
    return connections[alias].vendor


_local = threading.local()


def index_connection(alias: str) -> BaseDatabaseWrapper:
    """The connection that writes index rows on ``alias`` (autocommit; see the module docs)."""
    conn = connections[alias]
    if conn.vendor != "mysql":
        return conn
    pool: dict[str, BaseDatabaseWrapper] = _local.__dict__.setdefault("index_writers", {})
    writer = pool.get(alias)
    if writer is None or writer.settings_dict["NAME"] != conn.settings_dict["NAME"]:
        if writer is not None:
            writer.close()
        writer = connections.create_connection(alias)
        pool[alias] = writer
    return writer


@contextlib.contextmanager
def committed_reader(alias: str) -> Iterator[BaseDatabaseWrapper]:
    """A connection on ``alias`` that reads what is committed, whatever this thread's open
    transaction there has written: the autocommit index writer on MySQL; on SQLite (whose index
    rows share Django's connection) a connection of its own, closed afterwards, which WAL lets
    read the last commit while a write transaction is open."""
    conn = connections[alias]
    if conn.vendor == "mysql":
        yield index_connection(alias)
        return
    reader = connections.create_connection(alias)
    try:
        yield reader
    finally:
        reader.close()


def close_index_connections(**kwargs: Any) -> None:
    """Close this thread's index writers (connected to ``request_finished``)."""
    for writer in _local.__dict__.pop("index_writers", {}).values():
        with contextlib.suppress(Exception):
            writer.close()


request_finished.connect(close_index_connections, dispatch_uid="schemaless_close_index_writers")


class errors_named:  # lower case: used like the function it replaced
    """Turn "server unreachable" errors into :class:`ShardUnavailable` naming the shard.

    A class rather than a generator: it wraps every statement of the hot paths, and a plain
    ``__enter__``/``__exit__`` costs a fraction of ``contextlib.contextmanager``'s machinery.
    """

    __slots__ = ("alias",)

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None or not issubclass(exc_type, OperationalError):
            return
        unavailable = _unavailable(self.alias, exc)  # type: ignore[arg-type]
        if unavailable is not None:
            raise unavailable from exc


def read(
    alias: str,
    sql: str,
    params: Sequence[Any],
    conn: BaseDatabaseWrapper | None = None,
) -> list[tuple[Any, ...]]:
    """Run a read on ``alias`` (whose connection the caller may pass) and return its rows.

    A connection that went stale (a server restart, ``wait_timeout``) is replaced once, outside
    transactions: reads are safe to repeat. A server that is really down still fails with
    :class:`ShardUnavailable`.
    """
    if conn is None:
        conn = connections[alias]
    for attempt in (0, 1):
        try:
            return _fetch_all(conn, sql, params)
        except OperationalError as exc:
            unavailable = _unavailable(alias, exc)
            if unavailable is None:
                raise
            if attempt or conn.in_atomic_block:
                raise unavailable from exc
    raise AssertionError("unreachable")


def _unavailable(alias: str, exc: OperationalError) -> ShardUnavailable | None:
    """:class:`ShardUnavailable` if ``exc`` means the server is not there (its connection is
    then discarded), else None."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    if code in CONNECTION_LOST or "unable to open database file" in str(exc):
        _discard_broken(alias)
        return ShardUnavailable(alias, str(exc), lost=code in OPEN_CONNECTION_LOST)
    return None


def _fetch_all(conn: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    if conn.vendor != "mysql" or conn.queries_logged:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
    # statement_cursor() spelled out: this is every read's path, and each layer costs.
    conn.validate_thread_sharing()
    if conn.connection is None:  # first: a connect clears what a closed transaction left
        conn.ensure_connection()
    conn.validate_no_broken_transaction()
    try:
        cursor = conn.connection.cursor()
        try:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
        finally:
            cursor.close()
    except Exception:
        with conn.wrap_database_errors:  # the driver's exception, as Django's
            raise


@contextlib.contextmanager
def snapshot(alias: str) -> Iterator[bool]:
    """Reads on ``alias`` inside the block see the shard as of one instant (MySQL/MariaDB: a
    read-only ``REPEATABLE READ`` transaction ``WITH CONSISTENT SNAPSHOT``, as ``mysqldump
    --single-transaction`` takes; writers are not blocked). Yields True if so; on SQLite it
    yields False and each read sees the latest commits. Inside the block a lost connection
    raises :class:`ShardUnavailable` rather than reading on afresh without the snapshot."""
    conn = connections[alias]
    if conn.vendor != "mysql" or conn.in_atomic_block:
        yield False
        return
    with errors_named(alias), transaction.atomic(using=alias):
        with conn.cursor() as cursor:
            sessions.begin_snapshot(cursor)
        yield True


class statement_cursor:  # lower case: used like the function it replaced
    """A cursor for the hot paths' own SQL (``%s`` placeholders, Django's exceptions).

    On MySQL, when Django is not recording queries (``DEBUG``, ``assertNumQueries``), it is
    the driver's own cursor: Django's two cursor wrappers cost more client time than a
    statement's own work. Otherwise (and on other backends) it is Django's cursor. Either way
    the driver's errors leave the block as Django's (``IntegrityError``, ``OperationalError``...).
    """

    __slots__ = ("_conn", "_cursor", "_django")

    def __init__(self, conn: BaseDatabaseWrapper) -> None:
        self._conn = conn
        self._django: Any = None  # Django's cursor, when the driver's is not used
        self._cursor: Any = None

    def __enter__(self) -> Any:
        conn = self._conn
        if conn.vendor != "mysql" or conn.queries_logged:
            self._django = conn.cursor()
            return self._django.__enter__()
        self._django = None
        conn.validate_thread_sharing()
        if conn.connection is None:  # first: a connect clears what a closed transaction left
            conn.ensure_connection()
        conn.validate_no_broken_transaction()
        with conn.wrap_database_errors:
            self._cursor = conn.connection.cursor()
        return self._cursor

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._django is not None:
            self._django.__exit__(exc_type, exc, tb)
            return
        wrapper = self._conn.wrap_database_errors
        if exc_type is not None:
            with contextlib.suppress(Exception):
                self._cursor.close()
            wrapper.__exit__(exc_type, exc, tb)  # raises Django's exception for a driver error
            return
        with wrapper:
            self._cursor.close()


def _discard_broken(alias: str) -> None:
    with contextlib.suppress(Exception):
        connections[alias].close()
    writer = _local.__dict__.get("index_writers", {}).pop(alias, None)
    if writer is not None:
        with contextlib.suppress(Exception):
            writer.close()


def is_retryable(exc: BaseException) -> bool:
    if not isinstance(exc, OperationalError):
        return False
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    if code in RETRYABLE:
        return True
    return "database is locked" in str(exc)


_retries = 0
_retries_lock = threading.Lock()


def retries_made() -> int:
    """How many times this process retried an operation after a deadlock or lock wait timeout."""
    return _retries


def with_retries(operation: Callable[[], T], alias: str | None = None) -> T:
    """Run ``operation`` again after a deadlock or lock wait timeout, a bounded number of times
    (``SCHEMALESS["WRITE_RETRIES"]``).

    ``operation`` must be a whole transaction of its own. When the caller already has a
    transaction open on ``alias`` (``transaction.atomic``), it runs once: a deadlock rolled back
    the caller's whole transaction, so only the caller can retry it.
    """
    global _retries
    attempts = conf.get().write_retries
    if alias is not None and connections[alias].in_atomic_block:
        attempts = 0
    for attempt in range(attempts + 1):
        try:
            return operation()
        except OperationalError as exc:
            if attempt == attempts or not is_retryable(exc):
                raise
            with _retries_lock:
                _retries += 1
            logger.info("retrying after %s (attempt %d of %d)", exc, attempt + 1, attempts)
            # Exponential, with jitter: writers that deadlocked each other must not come
            # back at the same moment and deadlock again.
            time.sleep(0.005 * (2**attempt) * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")

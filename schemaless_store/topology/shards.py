"""The shards and the connections to them: their aliases, Django's connection and the index
writer of each, reads, the statement cursor of the hot paths, snapshots, and what a failure to
reach a server means (:class:`~..exceptions.ShardUnavailable`).

Which shard holds a key is the map's (:mod:`.bucket_map`); running a transaction again after a
deadlock is :mod:`.retries`; what a shard's server is (Galera, its latency) :mod:`.servers`.

Two connections per shard and thread are used on MariaDB: Django's own, which carries the entity
transaction (it holds entity row locks), and an *index writer* in autocommit mode for index rows.
An entity transaction therefore never holds index-table locks while it waits on another server,
so writers on different servers cannot deadlock across servers. SQLite cannot open a second
writer on a file that has a write transaction, so there index rows use Django's connection and
all writes to SQLite shards are serialized by a store-wide lock (SQLite has one writer anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import asgiref.local
from django.core.signals import request_finished
from django.db import OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..config import conf
from ..exceptions import ConfigurationError, ShardUnavailable
from ..sql import deadlock_watch, dialects, literals, sessions
from ..sql.server_errors import CONNECTION_LOST, OPEN_CONNECTION_LOST, code_of

T = TypeVar("T")
logger = logging.getLogger(__name__)


def shard_aliases() -> tuple[str, ...]:
    return conf.get().shards


def resolve_aliases(aliases: Sequence[str] | None) -> list[str]:
    """The shard aliases named (each checked, repeats dropped, order kept), or every shard's."""
    if aliases is None:
        return list(shard_aliases())
    for alias in aliases:
        check_alias(alias)
    return list(dict.fromkeys(aliases))


def check_alias(alias: str) -> str:
    if alias not in conf.get().shards:
        raise ConfigurationError(
            f"{alias!r} is not a shard alias; shards: {list(conf.get().shards)}"
        )
    return alias


def connection(alias: str) -> BaseDatabaseWrapper:
    """Django's connection for a shard (carries entity transactions and reads): always the
    one Django's handler gives the caller now, so that a caller's ``atomic()`` holds the
    store's writes. (Held per thread it diverged from Django's: after ``del
    connections[alias]``, and per task where an event loop runs in the thread;
    tests/core/test_shard_connection.py.)

    Not held, but read where Django keeps it: in a thread with no event loop, Django's
    handler reads the connection from a ``threading.local`` inside asgiref's ``Local``, which
    this reads directly, without the handler's three Python frames and the ``RuntimeError``
    asgiref raises and catches to learn there is no loop. Anything else goes through the
    handler: a loop running, a connection not made yet, an asgiref this code was not checked
    with, a wrapped handler or a replaced ``asyncio.get_running_loop`` (a test's mock)."""
    local = connections._connections  # type: ignore[attr-defined]
    if (
        type(local) is _direct.kind
        and _running_loop() is None
        and asyncio.get_running_loop is _GET_RUNNING_LOOP
        and type(connections).__getitem__ is _HANDLER_GETITEM
    ):
        conn = getattr(local._storage, alias, None)
        if conn is not None:
            return conn
    if _direct.kind is _Unprobed:
        _direct.probe()
    return connections[alias]


def direct_lookup() -> bool:
    """Whether :func:`connection` reads Django's connections where they are kept;
    tests/core/test_shard_connection.py checks it does with the asgiref versions this code was
    checked with, and does not with others."""
    if _direct.kind is _Unprobed:
        _direct.probe()
    return type(connections._connections) is _direct.kind  # type: ignore[attr-defined]


class _Unprobed:
    """:func:`connection`'s fast path before :meth:`_Direct.probe` has run (never a
    ``Local``'s type, so that path is not taken)."""


class _Direct:
    """Whether Django's connections can be read where asgiref keeps them: ``kind`` is
    asgiref's ``Local(thread_critical=True)`` class if so, None if not."""

    # asgiref's releases whose thread-critical Local was read and checked against this code
    # (a thread's values in ``_storage``, a ``threading.local``, while no loop runs).
    CHECKED = ((3, 13), (3, 13))

    def __init__(self) -> None:
        self.kind: type | None = _Unprobed

    def probe(self) -> None:
        """Decides, once, in a thread with no loop running (under gevent a thread started
        from inside a loop is a greenlet that would see it; so the first call outside one
        decides)."""
        if _running_loop() is not None:
            return
        self.kind = self.checked_kind()

    def checked_kind(self) -> type | None:
        kind = getattr(asgiref.local, "_ThreadCriticalLocal", None)
        if kind is None or not self.CHECKED[0] <= _release(asgiref.__version__) <= self.CHECKED[1]:
            return None
        try:
            local, mark = asgiref.local.Local(thread_critical=True), object()
            setattr(local, "schemaless_probe", mark)  # noqa: B010
            storage = local.__dict__.get("_storage")
            seen = isinstance(storage, threading.local) and getattr(
                storage, "schemaless_probe", None
            )
        except Exception:
            return None
        return kind if type(local) is kind and seen is mark else None


def _release(version: str) -> tuple[int, int]:
    """``(3, 13)`` of ``"3.13.0"``; ``(0, 0)`` where the version cannot be read."""
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return 0, 0


_running_loop = asyncio._get_running_loop
_GET_RUNNING_LOOP = asyncio.get_running_loop
_HANDLER_GETITEM = type(connections).__getitem__
_direct = _Direct()


def open_connections() -> list[BaseDatabaseWrapper]:
    """This thread's open connections: Django's and the index writers."""
    found = [c for c in connections.all(initialized_only=True) if c.connection is not None]
    writers = _local.__dict__.get("index_writers", {}).values()
    found.extend(w for w in writers if w.connection is not None)
    return found


def vendor(alias: str) -> str:
    return connection(alias).vendor


def dialect(alias: str) -> dialects.Dialect:
    """What the shard's kind of server can do and how it spells statements."""
    return dialects.of(connection(alias))


_local = threading.local()


def index_connection(alias: str) -> BaseDatabaseWrapper:
    """The connection that writes index rows on ``alias`` (autocommit; see the module docs)."""
    conn = connection(alias)
    if not dialects.of(conn).index_writer:
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
    transaction there has written: the autocommit index writer on MariaDB; on SQLite (whose index
    rows share Django's connection) a connection of its own, closed afterwards, which WAL lets
    read the last commit while a write transaction is open."""
    if dialects.of(connection(alias)).index_writer:
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


# A read that lost its connection again on a fresh one waits this long first (seconds),
# doubling up to READ_PAUSE_MAX: a move's fence kills every session on the shard, and a
# connection opened while it does is killed too (its "kill window").
READ_PAUSE = 0.005
READ_PAUSE_MAX = 0.2
_reads_retried = 0
_reads_retried_lock = threading.Lock()


def reads_retried() -> int:
    """How many times this process ran a read again after its connection was lost."""
    return _reads_retried


def read(
    alias: str,
    sql: str,
    params: Sequence[Any],
    conn: BaseDatabaseWrapper | None = None,
) -> list[tuple[Any, ...]]:
    """Run a read on ``alias`` (whose connection the caller may pass) and return its rows.

    Reads are safe to repeat, so outside transactions a lost connection does not fail one: a
    stale connection (a server restart, ``wait_timeout``, a persistent connection a move's
    fence ended) is replaced at once, and while fresh ones are lost too (opened inside a
    fence's kill window) the read tries again, pausing a little longer each time, for up to
    ``SCHEMALESS["MOVE_WAIT"]`` seconds, as a write waits for a flip. A server that refuses
    new connections (it is down) fails at once with :class:`ShardUnavailable`.
    """
    global _reads_retried
    if conn is None:
        conn = connection(alias)
    deadline: float | None = None
    pause = READ_PAUSE
    while True:
        try:
            return _fetch_all(conn, sql, params)
        except OperationalError as exc:
            unavailable = _unavailable(alias, exc)
            if unavailable is None:
                raise
            if conn.in_atomic_block:
                raise unavailable from exc
            if deadline is None:  # the first loss: a stale connection, replaced at once
                deadline = time.monotonic() + conf.get().move_wait
            elif not unavailable.lost or time.monotonic() + pause > deadline:
                raise unavailable from exc
            else:
                time.sleep(pause * random.uniform(0.5, 1.5))
                pause = min(pause * 2, READ_PAUSE_MAX)
            with _reads_retried_lock:
                _reads_retried += 1
            logger.debug("read on %s lost its connection (%s); reading again", alias, exc)


def unreachable(exc: BaseException) -> str | None:
    """The alias that ``exc`` (or what it was raised from) says cannot be reached: a
    :class:`ShardUnavailable`'s, or ``"database"`` for Django's ``OperationalError`` of a lost
    or refused connection, or of a SQLite file that cannot be opened (any alias, ``default``
    too); None if it says something else."""
    found: BaseException | None = exc
    for _depth in range(5):
        if found is None:
            return None
        if isinstance(found, ShardUnavailable):
            return found.alias
        if isinstance(found, OperationalError) and _not_there(found):
            return "database"
        found = found.__cause__
    return None


def _unavailable(alias: str, exc: OperationalError) -> ShardUnavailable | None:
    """:class:`ShardUnavailable` if ``exc`` means the server is not there (its connection is
    then discarded), else None."""
    code = code_of(exc)
    if _not_there(exc):
        _discard_broken(alias)
        return ShardUnavailable(alias, str(exc), lost=code in OPEN_CONNECTION_LOST)
    return None


def _not_there(exc: OperationalError) -> bool:
    """Whether ``exc`` says the server is not there: a connection refused or lost (MariaDB), or
    a database file that cannot be opened (SQLite)."""
    return code_of(exc) in CONNECTION_LOST or "unable to open database file" in str(exc)


def _fetch_all(conn: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    if not dialects.of(conn).driver_route or conn.queries_logged:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
    # statement_cursor() spelled out, and then the driver's own calls without a cursor (its
    # layers cost more client time than a read's one answer; issue 45, item 5): this is every
    # read's path. The statement is rendered as mysqlclient's cursor renders it.
    conn.validate_thread_sharing()
    if conn.connection is None:  # first: a connect clears what a closed transaction left
        conn.ensure_connection()
    conn.validate_no_broken_transaction()
    driver = conn.connection
    try:
        driver.query(literals.statement(driver, sql, params))
        answer = driver.store_result()  # None: a statement that returns no rows
        rows = [] if answer is None else list(answer.fetch_row(0))
        while driver.next_result() == 0:  # a later statement's answer: read (its error raises)
            driver.store_result()
        return rows
    except driver.Error as exc:
        deadlock_watch.note(conn, exc)  # a write's receiver may catch it (writes/swallowed.py)
        with conn.wrap_database_errors:  # the driver's exception, as Django's
            raise
    except BaseException:
        # An interrupt as the round trip returned: its answer is read, as closing a cursor
        # does, so that the session's next query is not out of step; else it is closed.
        if not sessions.read_to_the_end(driver):
            with contextlib.suppress(Exception):
                conn.close()
        raise


@contextlib.contextmanager
def snapshot(alias: str) -> Iterator[bool]:
    """Reads on ``alias`` inside the block see the shard as of one instant (MariaDB: a
    read-only ``REPEATABLE READ`` transaction ``WITH CONSISTENT SNAPSHOT``, as ``mysqldump
    --single-transaction`` takes; writers are not blocked). Yields True if so; on SQLite it
    yields False and each read sees the latest commits. Inside the block a lost connection
    raises :class:`ShardUnavailable` rather than reading on afresh without the snapshot."""
    conn = connection(alias)
    if not dialects.of(conn).consistent_snapshot or conn.in_atomic_block:
        yield False
        return
    with errors_named(alias), transaction.atomic(using=alias):
        with conn.cursor() as cursor:
            sessions.begin_snapshot(cursor)
        yield True


class statement_cursor:  # lower case: used like the function it replaced
    """A cursor for the hot paths' own SQL (``%s`` placeholders, Django's exceptions).

    On MariaDB, when Django is not recording queries (``DEBUG``, ``assertNumQueries``), it is
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
        if not dialects.of(conn).driver_route or conn.queries_logged:
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
            deadlock_watch.note(self._conn, exc)  # (writes/swallowed.py)
            with contextlib.suppress(Exception):
                self._cursor.close()
            wrapper.__exit__(exc_type, exc, tb)  # raises Django's exception for a driver error
            return
        with wrapper:
            self._cursor.close()


def _discard_broken(alias: str) -> None:
    """After a lost or refused connection on ``alias``: close this thread's index writer there
    and Django's connection, unless a transaction holds the latter (a caller's
    ``transaction.atomic()``, or the store's own, which ends it itself). Which of the two was
    lost is not known here, and closing a connection inside ``atomic()`` makes Django end the
    block without committing and without a word: the caller's transaction must stay whole
    when the index writer was lost, and when its own session was, the block's ``COMMIT``
    fails at its end, as Django reports a lost connection (docs/design.md#a-callers-transaction)."""
    conn = connection(alias)
    if not conn.in_atomic_block:
        with contextlib.suppress(Exception):
            conn.close()
    elif conn.needs_rollback and conn.connection is not None and not conn.is_usable():
        # Its session is the one lost, and Django, which could not roll a savepoint back on
        # it, marked the block for a rollback it would end without a word: its COMMIT, which
        # cannot land on a lost session, then raises at the block's end instead.
        conn.needs_rollback = False
    writer = _local.__dict__.get("index_writers", {}).pop(alias, None)
    if writer is not None:
        with contextlib.suppress(Exception):
            writer.close()

"""A lock on a shard's server that dies with the process holding it: one cleaner per (index,
shard), one mover at a time, one ``mapentities`` walk per (run, shard).

On MariaDB it is ``GET_LOCK()`` taken on a connection of its own to the shard's server:
the server releases it when that connection goes away, so a cleaner killed with ``kill -9``
leaves nothing to clean up. A dedicated connection, because Django's connection is closed and
reopened between batches (``close_old_connections()``), which would drop the lock mid-pass.

On a Galera cluster (``@@wsrep_on``) ``GET_LOCK()`` is one node's lock: two cleaners connected to
two nodes would both get it. There the lock is a **lease** instead, a row of
``schemaless_leases`` (created on first use; Galera replicates it) naming its owner and when it
expires. It is taken in one transaction if absent or expired; two nodes taking it at once both
succeed until COMMIT, where certification fails the later one (error 1213): "not taken this
time". A daemon thread renews it every third of :attr:`ServerLock.LEASE_SECONDS`; release deletes
it. A holder killed with ``kill -9`` keeps it until it expires. A holder whose renewal finds the
lease gone or another's, or that cannot renew it in time (its node died), has lost it:
:attr:`ServerLock.held` turns False and a warning is logged.

On SQLite it is ``flock()`` on a file beside the shard's database file; the kernel releases it
when the process exits. Each lock opens its own file, so two cleaners in one process (threads)
exclude each other too.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import DatabaseError, connections

from ..sql import dialects, server_locks, sessions
from ..sql.server_errors import ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, ER_NO_SUCH_TABLE, code_of
from ..sql.server_locks import LEASE_TABLE
from ..topology import servers, shards

# The cleaner's logger: runcleaner shows its warnings (a lost lease) on the terminal.
logger = logging.getLogger("schemaless_store.cleaner")

# MariaDB refuses lock names longer than this.
MAX_LOCK_NAME = 64
POLL_SECONDS = 0.2

_memory_locks: dict[tuple[str, str], threading.Lock] = {}
_memory_guard = threading.Lock()


def lock_name(database: str, index_name: str) -> str:
    """The ``GET_LOCK`` name of (database, key): readable when it fits, hashed when not. The
    prefix is the one the cleaner's lock had, so processes of an older version exclude these."""
    name = f"schemaless_cleaner.{database}.{index_name}"
    if len(name) <= MAX_LOCK_NAME:
        return name
    digest = hashlib.blake2b(name.encode(), digest_size=16).hexdigest()
    return f"schemaless_cleaner.{digest}"


class ServerLock:
    """The lock of one (key, shard), the key an index name for the cleaner (``movebuckets`` and
    ``mapentities`` use names no index can have). ``acquire()`` returns False if another process
    or thread holds it."""

    # Galera: a lease not renewed for this long is free for others to take. It is renewed every
    # third of it; its holder stops counting on it CLOCK_MARGIN seconds early, for node clocks
    # that differ by less than that.
    LEASE_SECONDS = 10.0
    CLOCK_MARGIN = 1.0

    def __init__(self, index_name: str, alias: str) -> None:
        self.index_name = index_name
        self.alias = alias
        self._held = False
        self._conn: Any = None
        self._fd: int | None = None
        self._memory: threading.Lock | None = None
        # Galera: None until the first connection tells; then the lease's state.
        self._galera: bool | None = None
        self.owner = f"{socket.gethostname()[:60]}:{os.getpid()}:{secrets.token_hex(8)}"
        self._valid_until = math.inf  # monotonic; a lease is not counted on after it
        self._lost = False
        self._guard = threading.Lock()  # the connection, between the holder and the renewer
        self._stop_renewing = threading.Event()
        self._renewer: threading.Thread | None = None
        settings = connections[alias].settings_dict
        # Named locks on the server (GET_LOCK, Galera's lease), else a file lock beside the
        # database file, else (an in-memory database) a lock in this process.
        self.named = dialects.of(connections[alias]).named_locks
        self._database = str(settings["NAME"])
        if self.named:
            self.name = lock_name(self._database, index_name)
            self.path: Path | None = None
        elif (
            self._database
            and ":memory:" not in self._database
            and "mode=memory" not in (self._database)
        ):
            db_file = Path(self._database)
            self.path = db_file.with_name(f"{db_file.name}.cleaner-{index_name}.lock")
            self.name = str(self.path)
        else:
            self.path = None
            self.name = f"in-process lock {alias}/{index_name}"

    def describe(self) -> str:
        if self.named and self._galera:
            return f"the lease {self.name!r} in {LEASE_TABLE} on the Galera cluster of {self.alias}"
        if self.named:
            return f"GET_LOCK({self.name!r}) on the server of {self.alias}"
        if self.path is not None:
            return f"flock on {self.path}"
        return self.name

    @property
    def held(self) -> bool:
        """True from ``acquire()`` to ``release()``; on Galera, False as soon as the lease is
        lost (see :attr:`lost`)."""
        return self._held and not self._lost and time.monotonic() < self._valid_until

    @property
    def lost(self) -> bool:
        """Galera: the lease was taken and is no longer ours, though not released: a renewal
        found it gone or another's, or it could not be renewed before it expired."""
        return self._held and not self.held

    def acquire(self, wait: float = 0.0, keep_waiting: Callable[[], bool] | None = None) -> bool:
        """Take the lock, waiting up to ``wait`` seconds (polling; ``keep_waiting`` can cut it
        short, e.g. on SIGTERM). True if taken."""
        if self.held:
            return True
        self.release()  # a lost lease: its renewer and connection go before trying again
        deadline = time.monotonic() + wait
        while True:
            if self._try():
                self._held = True
                if self._galera:
                    self._start_renewing()
                return True
            if time.monotonic() >= deadline or (keep_waiting is not None and not keep_waiting()):
                self._drop_connection()
                return False
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    def release(self) -> None:
        if not self._held:
            return
        self._stop_renewing.set()
        self._held = False
        with self._guard:
            if self._galera and self._conn is None:
                # Its renewal lost the connection: one more try, so the next holder need not
                # wait for the lease to expire.
                with contextlib.suppress(Exception):
                    self._conn = self._connect()
            if self._conn is not None:
                conn, self._conn = self._conn, None
                with contextlib.suppress(Exception), conn.cursor() as cursor:
                    if self._galera:
                        server_locks.release_lease(cursor, self.name, self.owner)
                    else:
                        server_locks.release_lock(cursor, self.name)
                # Closing would release a GET_LOCK anyway; RELEASE_LOCK first makes that
                # immediate even if the close is slow.
                with contextlib.suppress(Exception):
                    conn.close()
        if self._renewer is not None:
            renewer, self._renewer = self._renewer, None
            renewer.join()
        self._lost, self._valid_until = False, math.inf
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        if self._memory is not None:
            memory, self._memory = self._memory, None
            memory.release()

    def __enter__(self) -> ServerLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    # --- one attempt per backend ------------------------------------------------------------

    def _try(self) -> bool:
        if self.named:
            return self._try_mysql()
        if self.path is not None:
            return self._try_flock(self.path)
        return self._try_memory()

    def _try_mysql(self) -> bool:
        try:
            with shards.errors_named(self.alias):
                if self._conn is None:
                    self._conn = self._connect()
                return self._take_lease() if self._galera else self._get_lock()
        except BaseException:
            self._drop_connection()
            raise

    def _connect(self) -> Any:
        """The lock's own connection; the first one tells whether the server is a Galera node."""
        conn = connections.create_connection(self.alias)
        # The lock belongs to this object, not to a thread: a watchdog or a signal-driven
        # shutdown may release it from another one, and the lease's renewer uses it too, which
        # Django refuses by default.
        conn.inc_thread_sharing()
        try:
            with conn.cursor() as cursor:
                if self._galera is None:
                    self._galera = servers.is_galera(self.alias)
                if self._galera:
                    # Causal reads: START TRANSACTION waits until this node has applied what the
                    # cluster committed before, so a lease just released on another node is
                    # seen free (the decision's safety comes from certification, not this).
                    sessions.apply_first(cursor)
                else:
                    # GET_LOCK is the server's, whatever the database: the lock's connection
                    # leaves the shard's, so a move's fence, which ends the store's
                    # connections there (..fence), passes it by and the lock stays held.
                    sessions.leave_database(cursor)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        return conn

    def _get_lock(self) -> bool:
        with self._conn.cursor() as cursor:
            # If not taken, the connection stays open for the next poll.
            return server_locks.get_lock(cursor, self.name)

    def _take_lease(self, create: bool = True) -> bool:
        """One attempt at the lease: take its row if absent or expired and read whose it is, in
        one transaction. Ours only if that transaction commits: a node that wrote the row on a
        stale view fails certification (1213) instead."""
        started = time.monotonic()
        try:
            with self._conn.cursor() as cursor:
                owner = server_locks.take_lease(cursor, self.name, self.owner, self._lease_micros())
        except DatabaseError as exc:
            with contextlib.suppress(Exception), self._conn.cursor() as cursor:
                server_locks.rollback(cursor)
            code = code_of(exc)
            if code == ER_NO_SUCH_TABLE and create:
                with self._conn.cursor() as cursor:
                    server_locks.create_lease_table(cursor)
                return self._take_lease(create=False)
            if code in (ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT):
                return False  # another node's transaction won; the next poll tries again
            raise
        if owner != self.owner:
            return False
        self._valid_until = started + self.LEASE_SECONDS - self.CLOCK_MARGIN
        self._lost = False
        return True

    def _lease_micros(self) -> int:
        return round(self.LEASE_SECONDS * 1_000_000)

    # --- the lease's renewal (Galera) -------------------------------------------------------

    def _start_renewing(self) -> None:
        self._stop_renewing = threading.Event()
        self._renewer = threading.Thread(
            target=self._renew_until_released,
            name=f"lease renewer {self.alias}/{self.index_name}",
            daemon=True,
        )
        self._renewer.start()

    def _renew_until_released(self) -> None:
        stop = self._stop_renewing
        while not stop.wait(self.LEASE_SECONDS / 3):
            with self._guard:
                if stop.is_set():
                    return
                started = time.monotonic()
                if started >= self._valid_until:
                    self._lose("it could not be renewed before it expired")
                    return
                try:
                    if self._conn is None:
                        self._conn = self._connect()
                    with self._conn.cursor() as cursor:
                        renewed = server_locks.renew_lease(
                            cursor, self.name, self.owner, self._lease_micros()
                        )
                except Exception as exc:  # tried again until the lease would have expired
                    logger.warning("could not renew %s: %s", self.describe(), exc)
                    self._drop_connection()
                    continue
                if not renewed:
                    self._lose("another holder has it, or it was removed")
                    return
                self._valid_until = started + self.LEASE_SECONDS - self.CLOCK_MARGIN

    def _lose(self, reason: str) -> None:
        self._lost = True
        logger.warning("lost %s: %s; stop working under it", self.describe(), reason)

    # --- the other backends -----------------------------------------------------------------

    def _try_flock(self, path: Path) -> bool:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def _try_memory(self) -> bool:
        with _memory_guard:
            lock = _memory_locks.setdefault((self.alias, self.index_name), threading.Lock())
        if lock.acquire(blocking=False):
            self._memory = lock
            return True
        return False

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

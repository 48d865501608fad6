"""One cleaner per (index, shard): a lock that dies with the process holding it.

On MySQL/MariaDB it is ``GET_LOCK()`` taken on a connection of its own to the shard's server:
the server releases it when that connection goes away, so a cleaner killed with ``kill -9``
leaves nothing to clean up. A dedicated connection, because Django's connection is closed and
reopened between batches (``close_old_connections()``), which would drop the lock mid-pass.

On SQLite it is ``flock()`` on a file beside the shard's database file; the kernel releases it
when the process exits. Each lock opens its own file, so two cleaners in one process (threads)
exclude each other too.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import connections

from .. import shards

# MariaDB and MySQL refuse lock names longer than this.
MAX_LOCK_NAME = 64
POLL_SECONDS = 0.2

_memory_locks: dict[tuple[str, str], threading.Lock] = {}
_memory_guard = threading.Lock()


def lock_name(database: str, index_name: str) -> str:
    """The ``GET_LOCK`` name of (database, index): readable when it fits, hashed when not."""
    name = f"schemaless_cleaner.{database}.{index_name}"
    if len(name) <= MAX_LOCK_NAME:
        return name
    digest = hashlib.blake2b(name.encode(), digest_size=16).hexdigest()
    return f"schemaless_cleaner.{digest}"


class CleanerLock:
    """The lock of one (index, shard). ``acquire()`` returns False if another cleaner holds it."""

    def __init__(self, index_name: str, alias: str) -> None:
        self.index_name = index_name
        self.alias = alias
        self._held = False
        self._conn: Any = None
        self._fd: int | None = None
        self._memory: threading.Lock | None = None
        settings = connections[alias].settings_dict
        self.vendor = connections[alias].vendor
        self._database = str(settings["NAME"])
        if self.vendor == "mysql":
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
        if self.vendor == "mysql":
            return f"GET_LOCK({self.name!r}) on the server of {self.alias}"
        if self.path is not None:
            return f"flock on {self.path}"
        return self.name

    @property
    def held(self) -> bool:
        return self._held

    def acquire(self, wait: float = 0.0, keep_waiting: Callable[[], bool] | None = None) -> bool:
        """Take the lock, waiting up to ``wait`` seconds (polling; ``keep_waiting`` can cut it
        short, e.g. on SIGTERM). True if taken."""
        if self._held:
            return True
        deadline = time.monotonic() + wait
        while True:
            if self._try():
                self._held = True
                return True
            if time.monotonic() >= deadline or (keep_waiting is not None and not keep_waiting()):
                self._drop_connection()
                return False
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception), conn.cursor() as cursor:
                cursor.execute("SELECT RELEASE_LOCK(%s)", [self.name])
            # Closing would release it anyway; RELEASE_LOCK first makes that immediate even if
            # the close is slow.
            with contextlib.suppress(Exception):
                conn.close()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        if self._memory is not None:
            memory, self._memory = self._memory, None
            memory.release()

    def __enter__(self) -> CleanerLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    # --- one attempt per backend ------------------------------------------------------------

    def _try(self) -> bool:
        if self.vendor == "mysql":
            return self._try_mysql()
        if self.path is not None:
            return self._try_flock(self.path)
        return self._try_memory()

    def _try_mysql(self) -> bool:
        if self._conn is None:
            self._conn = connections.create_connection(self.alias)
            # The lock belongs to this object, not to a thread: a watchdog or a signal-driven
            # shutdown may release it from another one, which Django refuses by default.
            self._conn.inc_thread_sharing()
        try:
            with shards.errors_named(self.alias), self._conn.cursor() as cursor:
                cursor.execute("SELECT GET_LOCK(%s, 0)", [self.name])
                (got,) = cursor.fetchone()
        except BaseException:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
            raise
        return got == 1  # if not, the connection stays open for the next poll

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

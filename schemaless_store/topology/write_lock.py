"""The store-wide write lock of SQLite shards: SQLite has one writer per file, so the store
serializes its writes across threads (a lock) and processes (a file lock beside the first
SQLite shard). Where every shard is MariaDB it is a no-op (``write_lock()`` returns a null
context)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config import conf
from ..sql import dialects
from . import shards


class _StoreWriteLock:
    """Serializes writes to SQLite shards across threads (a lock) and processes (a file lock)."""

    def __init__(self) -> None:
        self._thread_lock = threading.RLock()
        self._depth = threading.local()
        self._fd: int | None = None
        self._fd_path: str | None = None
        # Whether no shard is a file (nothing to serialize), for the settings it was read from.
        self._all_mysql: tuple[Any, bool] | None = None

    def _lock_path(self) -> str | None:
        for alias in conf.get().shards:
            conn = shards.connection(alias)
            name = str(conn.settings_dict["NAME"])
            if dialects.of(conn).file_database and name and ":memory:" not in name:
                return str(Path(name).with_name(".schemaless-write.lock"))
        return None

    def __call__(self) -> contextlib.AbstractContextManager[None]:
        settings = conf.get()  # a new object whenever SCHEMALESS or DATABASES change
        known = self._all_mysql
        if known is None or known[0] is not settings:
            no_file = not any(
                dialects.of(shards.connection(a)).file_database for a in settings.shards
            )
            known = self._all_mysql = (settings, no_file)
        return _NO_LOCK if known[1] else self._locked()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock:
            depth = getattr(self._depth, "n", 0)
            self._depth.n = depth + 1
            try:
                if depth == 0:
                    path = self._lock_path()
                    if path and path != self._fd_path:
                        if self._fd is not None:
                            os.close(self._fd)
                        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                        self._fd_path = path
                    if self._fd is not None:
                        fcntl.flock(self._fd, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    if depth == 0 and self._fd is not None:
                        fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                self._depth.n = depth


_NO_LOCK = contextlib.nullcontext()
write_lock = _StoreWriteLock()

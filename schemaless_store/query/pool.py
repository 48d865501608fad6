"""The threads that read several shards at once (scatter-gather scans, large fetches).

Each thread opens its own connections (Django's are per thread). No request starts or ends on
these threads, so Django's ``request_started``/``request_finished`` never close them; the
threads do it themselves, so that ``CONN_MAX_AGE`` holds for them as for a request's thread
(issue 37: they kept 11-36 idle sessions per server whatever it said, and a move's fence ended
them all):

- after each piece of work a thread does what ``request_finished`` does
  (:func:`release_connections`): with ``CONN_MAX_AGE=0`` its connections are closed at once;
  with N, those older than N seconds, or left unusable by an error;
- a thread that waits for work wakes when its oldest connection reaches ``CONN_MAX_AGE`` and
  closes it, so an idle thread holds no session past its age either (``None``: kept, as
  Django keeps its own).

:func:`reset_scatter_pool` stops the threads, and each closes its connections as it ends.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, TypeVar

from django.db import connections

from ..topology import shards

T = TypeVar("T")
R = TypeVar("R")

THREADS = 8
# A piece of work: its future, the function and its arguments.
_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


def release_connections() -> None:
    """What Django's ``request_finished`` does, for this thread's connections: each one
    closed if ``CONN_MAX_AGE`` says it is too old (always, for 0) or an error left it
    unusable (``close_if_unusable_or_obsolete``), and the index writers closed."""
    for conn in connections.all(initialized_only=True):
        try:
            conn.close_if_unusable_or_obsolete()
        except Exception:  # a connection that cannot even be asked is of no more use
            with contextlib.suppress(Exception):
                conn.close()
    shards.close_index_connections()


def _idle_wait() -> float | None:
    """Seconds until this thread's oldest open connection is past ``CONN_MAX_AGE`` (None:
    none will be)."""
    ends = [
        conn.close_at
        for conn in connections.all(initialized_only=True)
        if conn.connection is not None and conn.close_at is not None
    ]
    return max(0.0, min(ends) - time.monotonic()) if ends else None


class ScatterThreads:
    """Up to ``size`` threads that run submitted work (``ThreadPoolExecutor``'s ``submit``
    and ``shutdown``), started as needed, each releasing its connections after each piece of
    work and when they reach ``CONN_MAX_AGE`` while it waits."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._work: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopped = False

    def submit(self, fn: Callable[..., R], *args: Any) -> Future[R]:
        future: Future[R] = Future()
        with self._lock:
            if self._stopped:
                raise RuntimeError("the scatter threads were stopped")
            self._work.put((future, fn, args))
            if not self._idle.acquire(timeout=0) and len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._run, name=f"{self._name}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        return future

    def shutdown(self, wait: bool = True) -> None:
        with self._lock:
            self._stopped = True
            threads = list(self._threads)
        for _thread in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()

    def _run(self) -> None:
        try:
            while True:
                item = self._next()
                if item is None:
                    return
                future, fn, args = item
                if future.set_running_or_notify_cancel():
                    try:
                        result = fn(*args)
                    except BaseException as exc:
                        release_connections()
                        future.set_exception(exc)
                    else:
                        release_connections()  # first: the caller then sees them released
                        future.set_result(result)
                self._idle.release()
        finally:
            connections.close_all()
            shards.close_index_connections()

    def _next(self) -> _Item | None:
        wait = _idle_wait()
        while True:
            try:
                return self._work.get(timeout=wait)
            except queue.Empty:  # idle past a connection's age: close it, wait on
                release_connections()
                wait = _idle_wait()
                if wait == 0:  # one that cannot be closed now (left in a transaction)
                    wait = None  # wait for work, not in a loop


_pool: ScatterThreads | None = None
_pool_lock = threading.Lock()


def scatter_pool() -> ScatterThreads:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ScatterThreads(THREADS, "schemaless-scatter")
        return _pool


def reset_scatter_pool() -> None:
    """Stop the scatter threads (their connections go with them); a new pool starts on demand."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True)


def scatter(work: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[work(item) for item in items]``, the items read at once: the first in the calling
    thread, the others on the scatter threads. (Handing every item to a thread costs the
    caller a wake-up it need not wait for: measured ~120 us of client CPU per 2-shard
    ``get_many``, docs/performance-history.md.)"""
    items = list(items)
    if len(items) < 2:
        return [work(item) for item in items]
    pool = scatter_pool()
    futures = [pool.submit(work, item) for item in items[1:]]
    try:
        first = work(items[0])
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    return [first, *(future.result() for future in futures)]

"""The threads that read several shards at once (scatter-gather scans, large fetches).

Each thread keeps its own connections (Django's are per thread); :func:`reset_scatter_pool`
stops them, and with them their connections.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def scatter_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="schemaless-scatter")
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

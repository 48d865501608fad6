"""The threads that read several shards at once (scatter-gather scans, large fetches).

Each thread keeps its own connections (Django's are per thread); :func:`reset_scatter_pool`
stops them, and with them their connections.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

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

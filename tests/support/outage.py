"""A shard that is down, for the tests of what the store and the admin do then."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

from django.db import connections

from schemaless_store.query.pool import reset_scatter_pool
from schemaless_store.topology import shards


@contextlib.contextmanager
def shard_down(alias: str, how: str = "refused") -> Iterator[None]:
    """Point ``alias`` at a server that is not there (refused) or never answers (black hole)."""
    conn = connections[alias]
    saved = {k: conn.settings_dict.get(k) for k in ("HOST", "PORT", "NAME", "OPTIONS")}
    listener = None
    conn.close()
    shards.close_index_connections()
    reset_scatter_pool()  # its threads hold their own connections
    if conn.vendor == "sqlite":
        conn.settings_dict["NAME"] = "/nonexistent-dir/for/sure/shard.sqlite3"
    else:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        if how == "blackhole":
            listener.listen(8)  # accepts TCP, never speaks: only a timeout ends the wait
        else:
            listener.close()  # nothing listens: refused at once
            listener = None
        conn.settings_dict.update(
            HOST="127.0.0.1",
            PORT=port,
            OPTIONS={**saved["OPTIONS"], "connect_timeout": 1},
        )
    try:
        yield
    finally:
        conn.close()
        shards.close_index_connections()
        conn.settings_dict.update(saved)
        if listener is not None:
            listener.close()

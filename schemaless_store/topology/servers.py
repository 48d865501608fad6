"""What a shard's server is, as background work and the write path need to know: how busy it
is (the round trip of a trivial statement, for the throttle) and whether it is a Galera node,
with the most rows one of its transactions may write (docs/replicas.md, "Galera").
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from django.db import DatabaseError

from ..sql import dialects, server_errors, sessions
from .shards import connection, errors_named


def probe_latency(aliases: Iterable[str]) -> float:
    """The slowest round trip, in seconds, of a trivial statement (``SELECT 1``) to the servers
    of ``aliases``: how busy they are, for the throttle of background work
    (:mod:`..guards.throttle`).
    On SQLite there is no server, and the probe is always quick."""
    slowest = 0.0
    for alias in aliases:
        began = time.perf_counter()
        # errors_named: a connection the fence killed is dropped, and the next probe reconnects.
        with errors_named(alias), connection(alias).cursor() as cursor:
            sessions.ping(cursor)
        slowest = max(slowest, time.perf_counter() - began)
    return slowest


# (alias, database) -> (a Galera node?, its wsrep_max_ws_rows or None): read once per process.
_galera: dict[tuple[str, str], tuple[bool, int | None]] = {}


def _galera_of(alias: str) -> tuple[bool, int | None]:
    conn = connection(alias)
    key = (alias, str(conn.settings_dict.get("NAME")))
    if key not in _galera:
        found: tuple[bool, int | None] = (False, None)
        if dialects.of(conn).may_be_galera:
            try:
                with errors_named(alias), conn.cursor() as cursor:
                    on, rows = sessions.galera_settings(cursor)
                if str(on).upper() in ("1", "ON"):
                    found = (True, int(rows) if int(rows) > 0 else None)
            except DatabaseError as exc:
                # Only "unknown system variable" says no Galera build; any other error is
                # not cached as "no Galera" (what runs on Galera must not take it for one).
                if server_errors.code_of(exc) != server_errors.ER_UNKNOWN_SYSTEM_VARIABLE:
                    raise
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

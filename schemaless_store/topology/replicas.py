"""Read replicas per shard, with read-your-writes on MariaDB's GTIDs (docs/replicas.md).

A shard alias may have replicas: other ``DATABASES`` aliases that replicate its server
(MariaDB's GTID replication; the store builds no replication of its own). Reads go to a replica
only when asked for, and only these reads: ``get``, ``get_many`` and index queries
(``filter_index``), with ``SCHEMALESS["READ_FROM_REPLICAS"]`` or inside :func:`from_replicas`
(:func:`from_primary` turns it off). Everything else reads the primary: writes and what they
read, unique claims, locked reads, the cleaner, bucket moves, ``all()``, the change feed,
anything inside a transaction on the shard.

**Read-your-writes.** After a write commits on a shard that has replicas, the store reads the
GTID of the transaction (``@@last_gtid``, same connection) and keeps it for the thread (or the
task): its *position* on that shard. A later read of that shard uses a replica only once the
replica has applied that position (its ``@@gtid_slave_pos``, or ``MASTER_GTID_WAIT(position,
REPLICA_WAIT)``), else the primary. :class:`~schemaless_store.middleware.ReadYourWrites` carries
the positions from one request of a user to the next in a signed cookie.

**Health.** Each process checks each replica at most every ``REPLICA_CHECK_INTERVAL`` seconds
(``SHOW SLAVE STATUS``): one whose replication threads are stopped, that lags more than
``REPLICA_MAX_LAG`` seconds, or that does not answer is not read until a later check finds it
well; its reads go to the primary, never to an error. :func:`status` is what the admin shows.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import random
import threading
import time
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from ..config import conf
from ..sql import dialects, gtids

logger = logging.getLogger("schemaless_store.topology.replicas")

Position = dict[int, int]  # GTID domain -> sequence number
# A thread's position on a shard whose write's GTID could not be read: it reads the primary.
UNKNOWN = "unknown"

_choice: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "schemaless_replica_reads", default=None
)
_positions: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "schemaless_positions", default=types.MappingProxyType({})
)


# --- which reads -------------------------------------------------------------------------------


@contextlib.contextmanager
def from_replicas(on: bool = True) -> Iterator[None]:
    """Inside the block, the reads that may use replicas do (``on=False``: they do not),
    whatever ``SCHEMALESS["READ_FROM_REPLICAS"]`` says."""
    token = _choice.set(on)
    try:
        yield
    finally:
        _choice.reset(token)


def from_primary() -> contextlib.AbstractContextManager[None]:
    """Inside the block, every read goes to the primaries."""
    return from_replicas(False)


def wanted() -> bool:
    """Whether reads that may use replicas should, here and now."""
    choice = _choice.get()
    return conf.get().read_from_replicas if choice is None else choice


def replicas_of(alias: str) -> tuple[str, ...]:
    return conf.get().replicas.get(alias, ())


# --- positions (read-your-writes) --------------------------------------------------------------


def parse_position(text: str | None) -> Position:
    """``"0-1-57,1-2-9"`` (MariaDB's GTID list) as ``{domain: sequence}``."""
    found: Position = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        domain, _server, sequence = part.split("-")
        found[int(domain)] = max(found.get(int(domain), 0), int(sequence))
    return found


def covers(applied: Position, needed: Position) -> bool:
    return all(applied.get(domain, -1) >= sequence for domain, sequence in needed.items())


def positions() -> Mapping[str, str]:
    """This thread's (or task's) positions: ``{shard alias: GTID}`` of its latest writes."""
    return _positions.get()


def set_positions(found: Mapping[str, str]) -> contextvars.Token[Mapping[str, str]]:
    """Start from these positions (the middleware: what the user's earlier requests wrote)."""
    return _positions.set(dict(found))


def reset_positions(token: contextvars.Token[Mapping[str, str]]) -> None:
    _positions.reset(token)


def note_write(alias: str, conn: Any) -> None:
    """After a commit on ``alias`` through ``conn``: keep the transaction's GTID as this
    thread's position on ``alias`` (only where the shard has replicas: it costs a round trip)."""
    if not replicas_of(alias) or not dialects.of(conn).replication:
        return
    try:
        with conn.cursor() as cursor:
            gtid = gtids.last_gtid(cursor)
    except Exception as exc:  # the write stands; this thread reads the primary instead
        logger.warning("cannot read the GTID of a write on %s (%s)", alias, exc)
        gtid = UNKNOWN
    if gtid:
        _positions.set({**_positions.get(), alias: str(gtid)})


# --- health --------------------------------------------------------------------------------------


@dataclass
class Health:
    """What the last check of a replica found."""

    alias: str
    checked_at: float = 0.0
    usable: bool = False
    state: str = "not checked"
    lag: float | None = None
    applied: Position = field(default_factory=dict)
    gtid: str = ""


_health: dict[str, Health] = {}
_health_lock = threading.Lock()


def health(alias: str, refresh: bool = False) -> Health:
    """The replica's health, checked again when older than ``REPLICA_CHECK_INTERVAL``."""
    settings = conf.get()

    def due(found: Health | None) -> bool:
        return (
            refresh
            or found is None
            or time.monotonic() - found.checked_at >= settings.replica_check_interval
        )

    found = _health.get(alias)
    if due(found):
        with _health_lock:  # one check at a time; the others use what it finds
            found = _health.get(alias)
            if due(found):
                found = _health[alias] = _check(alias, settings.replica_max_lag)
    assert found is not None
    return found


def _check(alias: str, max_lag: float) -> Health:
    checked = Health(alias, checked_at=time.monotonic())
    try:
        conn = connections[alias]
        with conn.cursor() as cursor:
            status, checked.gtid = gtids.replica_status(cursor)
    except Exception as exc:
        with contextlib.suppress(Exception):
            connections[alias].close()
        checked.state = f"unreachable: {exc}"
        return checked
    checked.applied = parse_position(checked.gtid)
    if status is None:
        checked.state = "not a replica (no replication configured)"
        return checked
    io, sql = status.get("Slave_IO_Running"), status.get("Slave_SQL_Running")
    lag = status.get("Seconds_Behind_Master")
    checked.lag = None if lag is None else float(lag)
    if sql != "Yes" or io != "Yes":
        error = status.get("Last_SQL_Error") or status.get("Last_IO_Error") or ""
        checked.state = f"replication stopped (IO {io}, SQL {sql}){': ' + error if error else ''}"
    elif checked.lag is None or checked.lag > max_lag:
        checked.state = f"lagging {checked.lag} s (bound {max_lag:g} s)"
    else:
        checked.usable = True
        checked.state = "replicating"
    return checked


def forget_health() -> None:
    """Check every replica again at its next read (tests; after a failover)."""
    with _health_lock:
        _health.clear()


# --- choosing where a read goes -------------------------------------------------------------------


def reader(alias: str) -> str:
    """The alias to read ``alias``'s data from now: a well replica that has applied this
    thread's position on ``alias``, or ``alias`` itself. Resolve it in the reading thread (the
    choice and the positions are the thread's), before handing the read to another."""
    names = conf.get().replicas.get(alias, ())  # replicas_of(), on every read's path
    if not names or not wanted() or connections[alias].in_atomic_block:
        return alias
    needed_text = _positions.get().get(alias, "")
    if needed_text == UNKNOWN:
        return alias
    needed = parse_position(needed_text)
    wait = conf.get().replica_wait
    for name in random.sample(names, len(names)):
        found = health(name)
        if not found.usable:
            continue
        if covers(found.applied, needed) or _caught_up(name, needed_text, wait, found):
            return name
    return alias


def _caught_up(alias: str, gtid: str, wait: float, found: Health) -> bool:
    """``MASTER_GTID_WAIT`` on the replica for at most ``wait`` seconds."""
    try:
        with connections[alias].cursor() as cursor:
            reached, applied = gtids.wait_for(cursor, gtid, wait)
    except Exception as exc:
        found.usable, found.state = False, f"unreachable: {exc}"
        return False
    found.applied = parse_position(applied)
    return reached


def status() -> list[dict[str, Any]]:
    """Every shard with replicas, and each replica's state, checked now (the admin)."""
    out = []
    for alias, names in conf.get().replicas.items():
        out.append(
            {
                "shard": alias,
                "replicas": [vars(health(name, refresh=True)) for name in names],
            }
        )
    return out


def read_with_fallback(alias: str, source: str, read: Any) -> Any:
    """``read(source)``, where ``source`` is :func:`reader`'s choice for ``alias``; if a replica
    fails, it is marked unusable until its next check and ``read(alias)`` answers instead."""
    if source == alias:
        return read(alias)
    try:
        return read(source)
    except Exception as exc:
        found = _health.get(source)
        if found is not None:
            found.usable, found.state = False, f"failed a read: {exc}"
        logger.warning(
            "replica %s of %s failed a read (%s); reading the primary", source, alias, exc
        )
        return read(alias)

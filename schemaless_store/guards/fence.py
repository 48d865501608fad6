"""The write fence: a write lands only on a shard that serves its buckets, and the shard's own
bucket table says which it serves (docs/design.md#the-fence; docs/resharding.md).

On MySQL/MariaDB the check costs no statement. Each connection learns once which buckets its
shard serves (:class:`Snapshot`: one primary-key read of the shard's generation, the served set
itself cached per process and generation) and every write checks its buckets against that in
the client (:func:`refused`). Taking a bucket away from a shard (:func:`withdraw`, a move's
fence) changes the table and its generation, then ends every other session on that shard's
database, whatever user opened it, and every session on another database (or none) whose
transaction holds uncommitted writes or locks (it may have written the shard's tables by their
qualified names), on every node of a Galera cluster, and waits until they are gone. Before it
changes anything it checks that it can (:func:`unready`): the mover's user
may see and end other users' sessions, and the nodes configured for the shard are all the
members the cluster reports. It needs no clock:

- a connection that read its snapshot before the change committed existed before the kill, so
  it is killed, and a transaction it had open is rolled back: it cannot commit any more;
- a connection that read its snapshot after the change committed sees the change.

A write whose connection was killed fails with a lost connection; the write protocol runs it
again on a fresh connection (:mod:`..writes.protocol`), which reads the new state and is refused.

A snapshot that does not serve a bucket is read again before a write is refused: a move to this
shard may have flipped since (that direction needs no kill, a stale "no" only costs a read).

On SQLite each write reads the bucket table inside its own transaction (:func:`refused` runs
:func:`..tables.buckets.serving`): there is no server whose connections could be ended, and the
read costs microseconds in process.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Collection, Sequence
from typing import Any

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.mysql.base import DatabaseWrapper as MySQLWrapper

from ..config.dburls import parse_nodes
from ..exceptions import MoveRefused, ShardUnavailable
from ..sql import sessions
from ..tables import buckets as bucket_table
from ..topology import shards
from ..topology.write_lock import write_lock

logger = logging.getLogger("schemaless_store.guards.fence")

# How long a withdrawal waits for the killed sessions to end (their rollbacks), in seconds.
KILL_WAIT = 30.0
_NONE: frozenset[int] = frozenset()
_ATTRIBUTE = "_schemaless_fence"
# (server, database) -> (generation, served buckets): the served set is read once per process
# and generation; each connection reads only the generation.
_served: dict[tuple[Any, ...], tuple[int, frozenset[int]]] = {}


class Snapshot:
    """The buckets a connection's shard served when the connection read them."""

    __slots__ = ("driver", "epoch", "served", "session")

    def __init__(self, driver: Any, session: int, epoch: int, served: frozenset[int]) -> None:
        self.driver = driver  # the driver connection it was read on
        self.session = session  # its server session (a reconnect is another one)
        self.epoch = epoch  # this process's changes of states when it was read
        self.served = served


def refused(conn: BaseDatabaseWrapper, buckets: Collection[int]) -> frozenset[int]:
    """Which of ``buckets`` the shard of ``conn`` does not serve (empty: the write may go on).
    On MySQL no statement runs unless the connection is new or a bucket is refused."""
    if conn.vendor != "mysql":
        return frozenset(buckets) - bucket_table.serving(conn, sorted(buckets))
    snap = conn.__dict__.get(_ATTRIBUTE)
    driver = conn.connection
    if (
        snap is None
        or snap.driver is not driver
        or snap.epoch != bucket_table.epoch
        or snap.session != driver.thread_id()
    ):
        snap = learn(conn)
    served = snap.served
    for number in buckets:
        if number not in served:
            break
    else:
        return _NONE
    served = learn(conn).served  # a move to this shard may have flipped since
    return frozenset(number for number in buckets if number not in served)


def learn(conn: BaseDatabaseWrapper) -> Snapshot:
    """Read the connection's snapshot of the buckets its shard serves (MySQL)."""
    epoch = bucket_table.epoch  # before the read: a change meanwhile makes it read again
    conn.ensure_connection()
    key = _server(conn)
    with shards.statement_cursor(conn) as cursor:
        generation = bucket_table.generation(cursor)
        known = _served.get(key)
        if generation is not None and known is not None and known[0] == generation:
            served = known[1]
        else:
            generation, served = bucket_table.served_now(cursor, conn.alias)
            if generation is not None:
                _served[key] = (generation, served)
    driver = conn.connection
    snap = Snapshot(driver, driver.thread_id(), epoch, served)
    conn.__dict__[_ATTRIBUTE] = snap
    return snap


def withdraw(
    alias: str, buckets: Sequence[int], state: int | None, *, end_connections: bool = False
) -> set[int]:
    """Give ``buckets`` on ``alias`` the state ``state``; if that takes a served bucket away
    from the shard (or ``end_connections``, a resumed fence), end the connections that may
    still believe it is served (MySQL). Returns the buckets withdrawn. :class:`MoveRefused`,
    with nothing changed, when the fence could not end every session (:func:`unready`)."""
    if end_connections and shards.vendor(alias) == "mysql":
        problem = unready(alias)
        if problem is not None:
            raise MoveRefused(problem)
    with write_lock():
        withdrawn = bucket_table.set_states(alias, buckets, state)
    if (withdrawn or end_connections) and shards.vendor(alias) == "mysql":
        end_other_connections(alias)
    return withdrawn


def end_other_connections(alias: str) -> int:
    """Kill every other session on ``alias``'s database, whatever its user, and every session
    elsewhere with uncommitted writes or locks (:func:`..sql.sessions.writing_elsewhere`), on
    each node of its server (each node of a Galera cluster, once it has applied what was
    committed), and wait until they are gone. This thread's own connections are kept (its
    snapshots are read again: :data:`..tables.buckets.epoch`). Returns the number killed.

    A node that does not answer is passed over only when the nodes that do say the cluster's
    primary component does not count it (a node outside it cannot commit); otherwise
    :class:`ShardUnavailable`."""
    conn = connections[alias]
    database = str(conn.settings_dict["NAME"])
    keep = _own_sessions()
    killed, members, reached, missing = 0, 0, 0, []
    for host, port in _nodes(conn):
        try:
            node = _connect(alias, host, port)
        except DatabaseError as exc:
            missing.append(f"{host}:{port} ({exc})")
            continue
        try:
            with node.cursor() as cursor:
                size = sessions.galera_members(cursor)
                if size is not None:
                    members = max(members, size)
                    # Wait until this node has applied the change: a session it opens after
                    # the kill below then reads it.
                    sessions.apply_first(cursor)
                    bucket_table.generation(cursor)
                server = sessions.where(cursor)[:2]
                # And a session on another database (or none) with uncommitted writes: it
                # may have written the shard's tables by their qualified names.
                found = [
                    *sessions.others(cursor, database),
                    *sessions.writing_elsewhere(cursor, database),
                ]
                victims = [n for n in found if (*server, n) not in keep]
                sessions.kill(cursor, victims)
                killed += len(victims)
                _await_gone(cursor, victims, f"{host}:{port}")
            reached += 1
        finally:
            node.close()
    if missing and (reached == 0 or members > reached):
        raise ShardUnavailable(
            alias,
            "cannot end the store's connections on every node that may commit: "
            + "; ".join(missing),
        )
    if killed:
        logger.info("fence on %s: ended %d connection(s)", alias, killed)
    return killed


def unready(alias: str) -> str | None:
    """Why a fence on ``alias`` (MySQL) could not end every session on its database, or None:
    the mover's user lacks a privilege it needs, or the Galera nodes configured for the shard
    are not all the cluster's members (a node left out would never be visited). Each reason
    says what fixes it."""
    conn = connections[alias]
    with shards.errors_named(alias), conn.cursor() as cursor:
        user = sessions.whoami(cursor)[0]
        missing = sessions.missing_fence_grants(cursor)
    if missing:
        return (
            f"the database user {user!r} of shard {alias!r} lacks {' and '.join(missing)}: a "
            "move's fence must see and end every session on the shard's database, whatever "
            "user opened it (docs/design.md#the-fence). Grant it: GRANT PROCESS, CONNECTION "
            f"ADMIN ON *.* TO '{user}'@'<host>' (SUPER instead of CONNECTION ADMIN before "
            "MariaDB 10.5.2), or run movebuckets as a user that has them"
        )
    return _membership_problem(alias, conn)


def _membership_problem(alias: str, conn: BaseDatabaseWrapper) -> str | None:
    """A Galera cluster's own membership (its size and its members' addresses), read on the
    first configured node that answers, against the nodes configured for ``alias``."""
    listed = _nodes(conn)
    for host, port in listed:
        try:
            node = _connect(alias, host, port)
        except DatabaseError:
            continue
        try:
            with node.cursor() as cursor:
                size = sessions.galera_members(cursor)
                addresses = sessions.galera_addresses(cursor) if size is not None else []
        finally:
            node.close()
        break
    else:
        return None  # none answers: the fence itself says so (ShardUnavailable)
    if size is None:
        return None
    shown = ", ".join(f"{h}:{p}" for h, p in listed)
    unlisted = [a for a in addresses if a.upper() != "AUTO" and not _listed(a, listed)]
    if size <= len(listed) and not unlisted:
        return None
    named = [a for a in addresses if a.upper() != "AUTO"]
    members = ", ".join(named) if named else "their addresses not reported"
    return (
        f"shard {alias!r} lists {len(listed)} Galera node(s) ({shown}) but its cluster has "
        f"{size} member(s) ({members}): the fence ends sessions only on the listed nodes, so a "
        "write through another could escape it. List every node in the shard's galera:// URL "
        "(docs/replicas.md), or take the extra node out of the cluster"
    )


def _listed(address: str, listed: Sequence[tuple[str, int]]) -> bool:
    """Whether a member's ``host:port`` is one of the configured nodes (names resolved)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return True  # an address it cannot read: the size comparison still applies
    ours = _addresses(host.strip("[]"))
    return any(int(port) == p and ours & _addresses(h) for h, p in listed)


def _addresses(host: str) -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None)} | {host}
    except OSError:
        return {host}


def kill_refused(alias: str) -> str | None:
    """Whether ``alias``'s database user may end every other session on the shard's
    database, as a move's fence must: it holds the grants (:data:`..tables.sessions.
    FENCE_GRANTS`), and a probe connection is opened, found in the process list and killed.
    None if it may; otherwise why not (a system check reports it, :mod:`..checks`)."""
    conn = connections[alias]
    with conn.cursor() as cursor:
        missing = sessions.missing_fence_grants(cursor)
    if missing:
        return f"it lacks {' and '.join(missing)}"
    probe = connections.create_connection(alias)
    try:
        with probe.cursor() as cursor:
            _user, target = sessions.whoami(cursor)
        conn = connections[alias]
        with conn.cursor() as cursor:
            user, _own = sessions.whoami(cursor)
            database = str(conn.settings_dict["NAME"])
            if target not in sessions.others(cursor, database, user):
                return "it cannot see its own other connections in the process list"
            try:
                sessions.kill(cursor, [target])
            except DatabaseError as exc:
                return str(exc)
            _await_gone(cursor, [target], alias)
        return None
    finally:
        probe.close()


def end_session(alias: str, node: tuple[str, int] | None, session: int, until: float) -> None:
    """End session ``session`` (a server thread id) on the node of ``alias`` it ran on
    (``node``, as the Galera backend noted it; None: the server's one), and wait until the
    process list no longer shows it (its rollback done, or its commit). A write whose commit
    answer was lost does this before it reads its receipt (docs/design.md#receipts).
    :class:`ShardUnavailable` if the node cannot be reached, or the session is still there
    at ``until`` (``time.monotonic()``)."""
    host, port = node or _nodes(connections[alias])[0]
    with shards.errors_named(alias):
        target = _connect(alias, host, port)
        try:
            with target.cursor() as cursor:
                sessions.kill(cursor, [session])
                _await_gone(cursor, [session], alias, until)
        finally:
            target.close()


def _await_gone(cursor: Any, ids: Sequence[int], where: str, until: float | None = None) -> None:
    deadline = time.monotonic() + KILL_WAIT if until is None else until
    left = sessions.alive(cursor, ids)
    while left:
        if time.monotonic() >= deadline:
            raise ShardUnavailable(where, f"sessions {sorted(left)} did not end after KILL")
        time.sleep(0.005)
        left = sessions.alive(cursor, left)


def _own_sessions() -> set[tuple[Any, ...]]:
    """``(hostname, port, session id)`` of this thread's open MySQL connections."""
    found: set[tuple[Any, ...]] = set()
    for wrapper in shards.open_connections():
        if wrapper.vendor != "mysql" or wrapper.connection is None:
            continue
        try:
            with wrapper.cursor() as cursor:
                found.add(sessions.where(cursor))
        except DatabaseError:
            continue  # a broken one is no session to keep
    return found


def _nodes(conn: BaseDatabaseWrapper) -> list[tuple[str, int]]:
    settings = conn.settings_dict
    port = int(settings.get("PORT") or 3306)
    listed = parse_nodes((settings.get("OPTIONS") or {}).get("nodes"), port)
    return listed or [(str(settings.get("HOST") or "127.0.0.1"), port)]


def _connect(alias: str, host: str, port: int) -> BaseDatabaseWrapper:
    """A connection of ``alias``'s settings to one node (plain MySQL backend: exactly there)."""
    settings = dict(connections.settings[alias])
    options = {k: v for k, v in (settings.get("OPTIONS") or {}).items() if k != "nodes"}
    settings.update(ENGINE="django.db.backends.mysql", HOST=host, PORT=str(port), OPTIONS=options)
    settings["NAME"] = connections[alias].settings_dict["NAME"]  # the test database's, if so
    node = MySQLWrapper(settings, alias)
    node.ensure_connection()
    return node


def _server(conn: BaseDatabaseWrapper) -> tuple[Any, ...]:
    settings = conn.settings_dict
    return (
        settings.get("ENGINE"),
        settings.get("HOST"),
        str(settings.get("PORT")),
        settings.get("NAME"),
        str((settings.get("OPTIONS") or {}).get("nodes")),
    )

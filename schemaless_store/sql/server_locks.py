"""The locks a background worker holds on a shard's server (``topology.server_lock.ServerLock``:
one cleaner per (index, shard), one mover, one ``mapentities`` worker per (run, shard)): a
``GET_LOCK`` name, which dies with its connection, or on a Galera cluster a row of
``schemaless_leases`` (created on first use; Galera replicates it) naming its owner and when it
expires.
"""

from __future__ import annotations

from typing import Any

LEASE_TABLE = "schemaless_leases"
CREATE_LEASE_TABLE = f"""
    CREATE TABLE IF NOT EXISTS {LEASE_TABLE} (
        name VARCHAR(191) NOT NULL PRIMARY KEY,
        owner VARCHAR(100) NOT NULL,
        expires DATETIME(6) NOT NULL
    ) ENGINE=InnoDB
"""
# Take the row if it is absent or expired. MariaDB assigns left to right: ``expires`` sees the
# new ``owner``, so it moves only when the row is (now) ours. UTC: nodes compare their clocks,
# whatever a session's time zone.
TAKE_LEASE = f"""
    INSERT INTO {LEASE_TABLE} (name, owner, expires)
    VALUES (%s, %s, UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND)
    ON DUPLICATE KEY UPDATE
        owner = IF(expires < UTC_TIMESTAMP(6), VALUES(owner), owner),
        expires = IF(owner = VALUES(owner), VALUES(expires), expires)
"""
RENEW_LEASE = f"""
    UPDATE {LEASE_TABLE} SET expires = UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND
    WHERE name = %s AND owner = %s
"""


def get_lock(cursor: Any, name: str) -> bool:
    """``GET_LOCK(name, 0)``: True if this connection now holds it."""
    cursor.execute("SELECT GET_LOCK(%s, 0)", [name])
    (got,) = cursor.fetchone()
    return bool(got == 1)


def release_lock(cursor: Any, name: str) -> None:
    cursor.execute("SELECT RELEASE_LOCK(%s)", [name])


def create_lease_table(cursor: Any) -> None:
    cursor.execute(CREATE_LEASE_TABLE)


def take_lease(cursor: Any, name: str, owner: str, micros: int) -> str:
    """In one transaction: take the lease ``name`` for ``owner`` (``micros`` long) if it is
    absent or expired, and read whose it is. The caller rolls back (:func:`rollback`) on an
    error: a node that wrote the row on a stale view fails certification at the COMMIT."""
    cursor.execute("START TRANSACTION")
    cursor.execute(TAKE_LEASE, [name, owner, micros])
    cursor.execute(f"SELECT owner FROM {LEASE_TABLE} WHERE name = %s", [name])
    (found,) = cursor.fetchone()
    cursor.execute("COMMIT")
    return str(found)


def rollback(cursor: Any) -> None:
    cursor.execute("ROLLBACK")


def renew_lease(cursor: Any, name: str, owner: str, micros: int) -> bool:
    """Push the lease's end ``micros`` further: False if it is no longer ``owner``'s."""
    cursor.execute(RENEW_LEASE, [micros, name, owner])
    return bool(cursor.rowcount == 1)  # rows matched (FOUND_ROWS)


def release_lease(cursor: Any, name: str, owner: str) -> None:
    cursor.execute(f"DELETE FROM {LEASE_TABLE} WHERE name = %s AND owner = %s", [name, owner])

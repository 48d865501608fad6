"""A MariaDB server's GTID positions, for read-your-writes on replicas (:mod:`..topology.replicas`;
docs/replicas.md): the GTID a primary gave this session's last transaction, and how far a
replica has applied its primary's changes (MariaDB-only: ``@@last_gtid``, ``@@gtid_slave_pos``,
``MASTER_GTID_WAIT``: a server without them fails the system check ``schemaless.E007``).
"""

from __future__ import annotations

from typing import Any


def last_gtid(cursor: Any) -> str:
    """The GTID of this session's last committed transaction ("" if none)."""
    cursor.execute("SELECT @@last_gtid")
    (gtid,) = cursor.fetchone()
    return str(gtid or "")


def replica_status(cursor: Any) -> tuple[dict[str, Any] | None, str]:
    """A replica's ``SHOW SLAVE STATUS`` as ``{column: value}`` (None: no replication
    configured) and the GTID position it has applied (``@@gtid_slave_pos``)."""
    cursor.execute("SHOW SLAVE STATUS")
    row = cursor.fetchone()
    names = [column[0] for column in cursor.description or ()]
    cursor.execute("SELECT @@gtid_slave_pos")
    (gtid,) = cursor.fetchone()
    status = None if row is None else dict(zip(names, row, strict=False))
    return status, str(gtid or "")


def wait_for(cursor: Any, gtid: str, seconds: float) -> tuple[bool, str]:
    """``MASTER_GTID_WAIT``: wait up to ``seconds`` until the replica has applied ``gtid``;
    whether it has, and the position it has applied then."""
    cursor.execute("SELECT MASTER_GTID_WAIT(%s, %s), @@gtid_slave_pos", [gtid, seconds])
    reached, applied = cursor.fetchone()
    return reached == 0, str(applied or "")

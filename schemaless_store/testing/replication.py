"""Throwaway GTID replicas of the servers of :mod:`.mariadb`: ``start_replica(primary)`` gives a
primary started with ``binlog=True`` a read-only replica (:class:`ReplicaServer`) holding its
data, with helpers to stop, delay and wait for replication (tests/replicas/test_replicas.py)."""

from __future__ import annotations

import atexit
import subprocess
import time
from pathlib import Path
from typing import Any

from .mariadb import MARIADB_CLIENT, MARIADB_DUMP, MariaDBServer, ServerError


class ReplicaServer(MariaDBServer):
    """A read-only server replicating ``primary`` by GTID (``MASTER_USE_GTID=slave_pos``), made
    by :func:`start_replica`. ``kill()`` and ``start()`` work as on any server: replication starts
    again by itself from where the replica was, and it reconnects to a primary that comes back.

    ``read_only`` is on. A user with the READ_ONLY ADMIN privilege writes anyway, and root has
    it; so unless ``enforce_read_only=False`` the replica takes it from root@127.0.0.1, the user
    of :meth:`url`: a write through the URL fails as on a production replica (error 1290).
    The tooling's own statements (:meth:`connect`) come as root@localhost, which keeps it.
    Replication applies every write, DDL included, whatever ``read_only`` says: test databases
    are made on the primary only and reach the replica that way (Django's ``TEST: MIRROR``).
    :meth:`promote` turns it into a primary (a failover).
    """

    def __init__(
        self, root: Path, name: str, primary: MariaDBServer, buffer_pool: str = "64M"
    ) -> None:
        super().__init__(root, name, buffer_pool=buffer_pool, binlog=True)
        self.primary: MariaDBServer | None = primary

    def options(self) -> list[str]:
        # A replica notices a dead primary within seconds instead of a minute.
        read_only = ["--read-only"] if self.primary is not None else []
        return [*super().options(), *read_only, "--slave-net-timeout=10"]

    def status(self) -> dict[str, Any]:
        """SHOW SLAVE STATUS as a dict (empty when the replica has no primary configured)."""
        rows = self.query("SHOW SLAVE STATUS")
        return rows[0] if rows else {}

    def lag_seconds(self) -> int | None:
        """Seconds_Behind_Master: how old the event being applied is; None while the
        replication threads are stopped or the primary cannot be reached."""
        lag = self.status().get("Seconds_Behind_Master")
        return None if lag is None else int(lag)

    def replicating(self) -> bool:
        """Both replication threads run (the I/O thread may still be connecting)."""
        status = self.status()
        return status.get("Slave_SQL_Running") == "Yes" and status.get("Slave_IO_Running") in (
            "Yes",
            "Connecting",
        )

    def stop_replication(self) -> None:
        """STOP SLAVE: the replica keeps its data and serves reads, and falls behind."""
        self.query("STOP SLAVE")

    def start_replication(self, timeout: float = 30) -> None:
        """START SLAVE, and wait until its I/O thread has connected (:meth:`wait_replicating`)."""
        self.query("START SLAVE")
        self.wait_replicating(timeout)

    def delay(self, seconds: int) -> None:
        """Apply each transaction ``seconds`` after the primary committed it (MASTER_DELAY; 0
        for none): a replica that lags on purpose. Replication runs afterwards, its I/O thread
        connected (:meth:`wait_replicating`)."""
        self.query("STOP SLAVE")
        self.query("CHANGE MASTER TO MASTER_DELAY = %s", (int(seconds),))
        self.start_replication()

    def wait_replicating(self, timeout: float = 30) -> None:
        """Wait until both replication threads run and the I/O thread is connected to the
        primary; ServerError after ``timeout`` seconds, with the replica's status.

        Right after ``START SLAVE`` the I/O thread is ``Preparing`` or ``Connecting`` for a
        moment (milliseconds on an idle machine, longer on a busy one), and
        ``Seconds_Behind_Master`` is NULL: the store's health check (``replicas._check``)
        rightly reads such a replica as not replicating and sends its reads to the primary. A
        test that means to read a replica it has just restarted waits here first."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if (
                status.get("Slave_SQL_Running") == "Yes"
                and status.get("Slave_IO_Running") == "Yes"
                and status.get("Seconds_Behind_Master") is not None
            ):
                return
            if time.monotonic() > deadline:
                shown = {
                    key: status.get(key)
                    for key in (
                        "Slave_IO_Running",
                        "Slave_SQL_Running",
                        "Seconds_Behind_Master",
                        "Last_IO_Error",
                        "Last_SQL_Error",
                    )
                }
                raise ServerError(f"replica {self.name} not replicating after {timeout}s: {shown}")
            time.sleep(0.005)

    def promote(self) -> None:
        """Fail over to this replica: it stops following its primary, forgets it and takes
        writes, after a restart too. Wait until it is caught up first to lose nothing."""
        self.query("STOP SLAVE")
        self.query("RESET SLAVE ALL")
        self.query("SET GLOBAL read_only = 0")
        self.primary = None

    def wait_caught_up(self, timeout: float = 30) -> None:
        """Wait until the replica has applied everything the primary has committed so far
        (MASTER_GTID_WAIT on the primary's ``@@gtid_binlog_pos``); ServerError after
        ``timeout`` seconds, with the replica's status."""
        if self.primary is None:
            raise ServerError(f"{self.name} was promoted: it follows no primary")
        position = self.primary.query("SELECT @@gtid_binlog_pos AS pos")[0]["pos"]
        result = self.query(
            "SELECT MASTER_GTID_WAIT(%s, %s) AS result", (position, float(timeout))
        )[0]["result"]
        if result != 0:
            status = {
                key: self.status().get(key)
                for key in (
                    "Slave_IO_Running",
                    "Slave_SQL_Running",
                    "Gtid_IO_Pos",
                    "Last_IO_Error",
                    "Last_SQL_Error",
                    "SQL_Delay",
                )
            }
            raise ServerError(
                f"replica {self.name} not at the primary's {position!r} after {timeout}s: {status}"
            )


def start_replica(
    primary: MariaDBServer,
    name: str | None = None,
    enforce_read_only: bool = True,
    timeout: float = 60,
) -> ReplicaServer:
    """Start a new server replicating ``primary`` (which must have ``binlog=True``), holding
    its data already; it stops at interpreter exit.

    The primary's databases (all but ``mysql``: users come from the same template) are copied
    by ``mariadb-dump --single-transaction --gtid --master-data``, which sets the replica's
    ``gtid_slave_pos`` to the dump's position; replication then starts from there. The replica
    lives beside the primary's directory and from the same datadir template when it has one.
    """
    if not primary.query("SELECT @@log_bin AS on_")[0]["on_"]:
        raise ServerError(f"{primary.name} writes no binary log: start it with binlog=True")
    number = 1
    while name is None:
        name = f"{primary.name}-replica{number}"
        if (primary.root.parent / name).exists():
            name, number = None, number + 1
    replica = ReplicaServer(primary.root.parent, name, primary, buffer_pool=primary.buffer_pool)
    atexit.register(replica.stop)
    try:
        replica.start(template=primary.template, timeout=timeout)
        _copy_databases(primary, replica, timeout)
        # MASTER_CONNECT_RETRY 1: a restarted primary is followed again within a second, not 60.
        replica.query(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %s,"
            " MASTER_USER = 'root', MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos,"
            " MASTER_CONNECT_RETRY = 1",
            (primary.port,),
        )
        if enforce_read_only:
            connection = replica.connect()
            try:
                with connection.cursor() as cursor:
                    # Local, never in the replica's own binary log.
                    cursor.execute("SET SESSION sql_log_bin = 0")
                    cursor.execute("REVOKE READ_ONLY ADMIN ON *.* FROM 'root'@'127.0.0.1'")
            finally:
                connection.close()
        replica.start_replication()
        replica.wait_caught_up(timeout)
    except Exception:
        replica.stop()
        raise
    return replica


def _copy_databases(primary: MariaDBServer, replica: MariaDBServer, timeout: float) -> None:
    """Dump the primary's databases into the replica, with the GTID position they are at."""
    dump = subprocess.Popen(
        [
            MARIADB_DUMP,
            "--no-defaults",
            f"--socket={primary.socket_path}",
            "--user=root",
            "--all-databases",
            "--ignore-database=mysql",
            "--single-transaction",
            "--gtid",
            "--master-data=1",
            "--routines",
            "--events",
            "--triggers",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert dump.stdout is not None
    try:
        load = subprocess.run(
            [
                MARIADB_CLIENT,
                "--no-defaults",
                f"--socket={replica.socket_path}",
                "--user=root",
                # The copy is the primary's history, not the replica's own transactions.
                "--init-command=SET SESSION sql_log_bin = 0",
            ],
            stdin=dump.stdout,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        dump.stdout.close()
        dump_errors = dump.stderr.read().decode(errors="replace") if dump.stderr else ""
        dump.wait(timeout=timeout)
    if dump.returncode != 0 or load.returncode != 0:
        raise ServerError(
            f"copying {primary.name} into {replica.name} failed:\n{dump_errors[-2000:]}"
            f"{load.stderr[-2000:]}"
        )

"""Throwaway MariaDB servers for tests and benchmarks: real ``mariadbd`` processes on free ports.

Each server lives in a temporary directory (data, socket, log) and is removed on ``stop()``;
``start_servers()`` also stops them at interpreter exit. Nothing depends on a server already
running on the machine.

A server started with ``binlog=True`` writes a GTID binary log, which :mod:`.replication`'s
``start_replica(primary)`` follows. Galera clusters are in :mod:`.galera`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Forensics (a soak's lost write): with SCHEMALESS_KEEP_SERVERS set, every server writes a binary
# log and its directory stays after it stops, for mysqlbinlog and the error logs.
KEEP = bool(os.environ.get("SCHEMALESS_KEEP_SERVERS"))


def remove_dir(path: Path) -> None:
    """Remove a server's directory, unless SCHEMALESS_KEEP_SERVERS keeps it."""
    if KEEP:
        print(f"schemaless testing: kept {path}", flush=True)
        return
    shutil.rmtree(path, ignore_errors=True)


MARIADBD = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
INSTALL_DB = shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db"
MARIADB_DUMP = shutil.which("mariadb-dump") or "/usr/bin/mariadb-dump"
MARIADB_CLIENT = shutil.which("mariadb") or "/usr/bin/mariadb"


#: How many times a server that has never run tries new ports when its own were taken.
PORT_ATTEMPTS = 3


class ServerError(RuntimeError):
    """A throwaway server could not be installed or started; the message has its log's tail."""


class PortTaken(ServerError):
    """Another process bound a port the server was to listen on before it did."""


#: Where :func:`free_port` picks from when the kernel's ephemeral range leaves room below it.
LOWEST_PORT = 20000
_pick = random.SystemRandom()
# The ports this process has handed out: none twice (a Galera node takes four at once, before
# any of them is bound).
_handed_out: set[int] = set()
_handing = threading.Lock()


def _ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for the local port of an outgoing connection (Linux's default if
    it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port on 127.0.0.1 that nothing holds now, for a throwaway server to listen on.

    It is picked at random **below** the kernel's ephemeral range. Asking the kernel (bind to
    port 0) hands out an ephemeral port, the very range every outgoing connection takes its
    local port from: with thousands of test connections opening and closing, one of them could
    hold that port by the time the server binds it (CI saw a Galera node abort on "Address
    already in use"). Below that range only another pick, in another process, can take the
    same port before the server binds it; :meth:`MariaDBServer.start` then picks again."""
    low, _ = _ephemeral_ports()
    with _handing:
        if low - LOWEST_PORT >= 1000:
            for _ in range(200):
                port = _pick.randrange(LOWEST_PORT, low)
                if port not in _handed_out and _bindable(port):
                    _handed_out.add(port)
                    return port
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port


def _as_root() -> list[str]:
    return ["--user=root"] if os.geteuid() == 0 else []


def install_datadir(datadir: Path) -> None:
    """Create a fresh system database in ``datadir`` (root@127.0.0.1 with no password)."""
    if not Path(MARIADBD).exists():
        raise ServerError(f"mariadbd not found (looked for {MARIADBD}); install mariadb-server")
    # The bootstrap server's temporary tables go to a directory of its own: in the shared /tmp,
    # two installs at once (two test lanes starting together) collided on the same
    # "#sql-temptable-..." name and one failed ("Unknown table 'mysql.tmp_user_sys'").
    tmpdir = datadir.parent / f"{datadir.name}-install-tmp"
    tmpdir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [
            INSTALL_DB,
            "--no-defaults",
            f"--datadir={datadir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *_as_root(),
            f"--tmpdir={tmpdir}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise ServerError(
            f"mariadb-install-db failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )


class MariaDBServer:
    """One ``mariadbd`` process; ``url(db)`` gives a django-environ URL for a database on it.

    With ``binlog=True`` it writes a row-based binary log with GTIDs (its server id is its port,
    unique among the servers on this machine), so that :func:`start_replica` can follow it.
    """

    def __init__(
        self,
        root: Path,
        name: str,
        buffer_pool: str = "64M",
        binlog: bool = False,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        self.root = root / name
        self.datadir = self.root / "data"
        self.name = name
        self.buffer_pool = buffer_pool
        self.binlog = binlog
        # The address it listens on, and a command it runs under (``bench.netem`` starts servers
        # in a network namespace of their own: ``ip netns exec NAME``, on that namespace's
        # address); the defaults are loopback and nothing.
        self.host = host
        self.prefix = list(prefix)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        # Whether it has run once: from then on its ports are known to others and stay.
        self.started = False
        # The datadir this server was first made from, for replicas made like it.
        self.template: Path | None = None

    @property
    def tmpdir(self) -> Path:
        return self.root / "tmp"

    @property
    def log_path(self) -> Path:
        return self.root / "error.log"

    @property
    def socket_path(self) -> Path:
        return self.root / "mysqld.sock"

    @property
    def server_id(self) -> int:
        return self.port

    def url(self, database: str, **options: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"mysql://root@{self.host}:{self.port}/{database}" + (f"?{query}" if query else "")

    def options(self) -> list[str]:
        """The ``mariadbd`` command line after the program; subclasses add to it."""
        options = [
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--tmpdir={self.tmpdir}",
            f"--port={self.port}",
            f"--bind-address={self.host}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.root / 'mysqld.pid'}",
            f"--log-error={self.log_path}",
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_bin",
            f"--innodb-buffer-pool-size={self.buffer_pool}",
            "--innodb-log-file-size=64M",
            "--innodb-flush-log-at-trx-commit=2",
            "--max-allowed-packet=64M",
            "--max-connections=500",
            *_as_root(),
        ]
        if self.binlog or KEEP:
            options += [
                # Relative names: inside the datadir, the same whatever the host is called.
                "--log-bin=binlog",
                "--relay-log=relay",
                f"--server-id={self.server_id}",
                "--binlog-format=ROW",
                "--log-slave-updates",
            ]
        return options

    def start(self, template: Path | None = None, timeout: float = 60) -> MariaDBServer:
        if not self.datadir.exists():
            self.make_datadir(template)
        if not self.port:
            self.port = free_port()
        # Temporary files (big sorts, ALTER TABLE) go next to the datadir, never to the
        # machine's /tmp: the server leaves nothing behind and depends on nothing outside root.
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            log_start = self._log_size()
            self.process = subprocess.Popen(
                [*self.prefix, MARIADBD, *self.options()],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                self._wait_ready(timeout, log_start)
            except PortTaken:
                # Another process took a port between the pick and the bind: a server that has
                # never run may pick again (one that ran keeps its ports: others know them),
                # on a fresh datadir (the failed start may have written to it).
                if self.started or attempt == PORT_ATTEMPTS:
                    raise
                self.stop(remove=False)
                shutil.rmtree(self.datadir)
                self.make_datadir(self.template)
                self.choose_ports()
                continue
            self.started = True
            return self
        raise AssertionError("unreachable")

    def make_datadir(self, template: Path | None) -> None:
        """A fresh datadir: a copy of ``template``, or a new install."""
        self.root.mkdir(parents=True, exist_ok=True)
        if template is not None:
            shutil.copytree(template, self.datadir)
            self.template = template
        else:
            install_datadir(self.datadir)

    def choose_ports(self) -> None:
        """New ports for a server that could not bind the ones it had; subclasses add theirs."""
        self.port = free_port()

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _port_taken(self, log_start: int) -> bool:
        with contextlib.suppress(OSError), self.log_path.open("rb") as log:
            log.seek(log_start)
            return b"Address already in use" in log.read()
        return False

    def connect(self, database: str | None = None, **kwargs: Any) -> Any:
        """A MySQLdb connection as root@localhost over the socket (all privileges, autocommit),
        for the tooling's own statements; the store connects through :meth:`url`."""
        import MySQLdb

        if database is not None:
            kwargs["database"] = database
        connection = MySQLdb.connect(
            unix_socket=str(self.socket_path), user="root", connect_timeout=5, **kwargs
        )
        connection.autocommit(True)
        return connection

    def query(self, sql: str, args: Any = None) -> list[dict[str, Any]]:
        """Run one statement on a connection of its own; its rows as dicts."""
        import MySQLdb.cursors

        connection = self.connect(cursorclass=MySQLdb.cursors.DictCursor)
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, args)
                return list(cursor.fetchall() or ())
        finally:
            connection.close()

    def _wait_ready(self, timeout: float, log_start: int = 0) -> None:
        """Until the server answers on its port; :class:`PortTaken` if its log says it could
        not bind one, or another server answers there."""
        import MySQLdb

        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                error = PortTaken if self._port_taken(log_start) else ServerError
                raise error(
                    f"mariadbd {self.name} exited ({self.process.returncode}):\n{self.log_tail()}"
                )
            try:
                if self.host == "127.0.0.1":
                    answering = MySQLdb.connect(
                        host=self.host, port=self.port, user="root", connect_timeout=1
                    )
                    try:
                        with answering.cursor() as cursor:
                            cursor.execute("SELECT @@datadir")
                            datadir = Path(cursor.fetchone()[0])
                    finally:
                        answering.close()
                    if datadir.resolve() != self.datadir.resolve():
                        # Another lane's server (root without a password too) holds the port.
                        raise PortTaken(
                            f"mariadbd {self.name}: port {self.port} answers for {datadir}"
                        )
                else:
                    # Another address: root is only root@127.0.0.1, so let root in from the
                    # clients of that network (the server listens on nothing else).
                    self.query("CREATE USER IF NOT EXISTS 'root'@'%'")
                    self.query("GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION")
                return
            except MySQLdb.OperationalError:
                if time.monotonic() > deadline:
                    self.stop(remove=False)
                    raise ServerError(
                        f"mariadbd {self.name} not ready after {timeout}s:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.1)

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def kill(self) -> None:
        """SIGKILL the server (a crash); ``start()`` brings it back on the same port and data.

        The whole process group goes: helpers the server ran (a Galera state transfer's rsync)
        die with it instead of outliving it."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None

    def stop(self, remove: bool = True) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self.process = None
        if remove:
            remove_dir(self.root)


def start_servers(
    count: int = 2,
    buffer_pool: str = "64M",
    binlog: bool = False,
    host: str = "127.0.0.1",
    prefix: Sequence[str] = (),
) -> list[MariaDBServer]:
    """Start ``count`` servers in a fresh temporary directory; they stop at interpreter exit.

    ``binlog=True`` gives each a GTID binary log, so that :func:`start_replica` can follow it.
    ``host`` and ``prefix``: see :class:`MariaDBServer`.
    """
    root = Path(tempfile.mkdtemp(prefix="schemaless-mariadb-"))
    template = root / "template"
    servers: list[MariaDBServer] = []

    def stop_all() -> None:
        for server in servers:
            server.stop()
        remove_dir(root)

    atexit.register(stop_all)
    try:
        install_datadir(template)
        for number in range(count):
            server = MariaDBServer(
                root,
                f"server{number}",
                buffer_pool=buffer_pool,
                binlog=binlog,
                host=host,
                prefix=prefix,
            )
            servers.append(server)
            server.start(template=template)
    except Exception:
        stop_all()
        raise
    return servers

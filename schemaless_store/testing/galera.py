"""A throwaway Galera cluster for tests: ``mariadbd`` nodes with the galera-4 provider on free
loopback ports, each a :class:`.mariadb.MariaDBServer` in one temporary directory, stopped and
removed at interpreter exit.

The first node bootstraps the cluster; the others join it and receive its data by an rsync
state transfer (SST), one after the other. A node killed and restarted catches up by IST (the
writes it missed, from a donor's gcache) or, when those are gone, by a new SST. Run as root,
the nodes run as the ``mysql`` user (see :func:`_run_as`). Needs Debian's mariadb-server, which
brings galera-4, rsync and the ``wsrep_sst_rsync`` script.

What the store meets on Galera (tests/replicas/test_testing_replication.py shows each): two nodes
writing the same row both succeed until COMMIT, where the later one gets a deadlock error (1213);
GET_LOCK() is one node's lock, not the cluster's; a read on one node sees a write committed on
another only with ``wsrep_sync_wait`` set (it is 0); write sets have no row limit
(``wsrep_max_ws_rows`` 0) and a 2 GB size limit.
"""

from __future__ import annotations

import atexit
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .mariadb import (
    KEEP,
    MARIADBD,
    MariaDBServer,
    ServerError,
    free_port,
    install_datadir,
    remove_dir,
)

GALERA_PROVIDER = "/usr/lib/galera/libgalera_smm.so"
SST_SCRIPT = shutil.which("wsrep_sst_rsync") or "/usr/bin/wsrep_sst_rsync"
SERVER_USER = "mysql"

# A killed node is noticed after evs.suspect_timeout, and until then the others' commits wait
# for it: shorter than Galera's defaults (5 s, 15 s) so tests wait less, long enough that a busy
# two-core machine does not evict a healthy node.
PROVIDER_OPTIONS = (
    "gcache.size=32M",
    "evs.keepalive_period=PT0.5S",
    "evs.inactive_check_period=PT0.5S",
    "evs.suspect_timeout=PT3S",
    "evs.inactive_timeout=PT6S",
    "evs.install_timeout=PT6S",
)


class GaleraNode(MariaDBServer):
    """One node of a :class:`GaleraCluster`: ``port``, ``url(db)``, ``kill()`` (SIGKILL),
    ``restart()`` (rejoins and waits until the cluster is Synced), ``state()``. ``start()``
    alone returns as soon as the node answers, possibly before it is Synced."""

    def __init__(self, cluster: GaleraCluster, root: Path, name: str, buffer_pool: str) -> None:
        super().__init__(root, name, buffer_pool=buffer_pool)
        self.cluster = cluster
        self.port = free_port()
        self.group_port = free_port()
        self.ist_port = free_port()
        self.sst_port = free_port()
        # Only the first start of the first node founds the cluster; a node that comes back
        # later joins the others, whichever it is.
        self.bootstrap = False
        self.start_position: str | None = None

    def choose_ports(self) -> None:
        """Every port anew (a node that never ran: the nodes started before it have its old
        group address in their list, one address of several that does not answer)."""
        super().choose_ports()
        self.group_port = free_port()
        self.ist_port = free_port()
        self.sst_port = free_port()

    def make_datadir(self, template: Path | None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(template or self.cluster.template, self.datadir)
        _give_to_server(self.root)

    @property
    def group_address(self) -> str:
        return f"127.0.0.1:{self.group_port}"

    def options(self) -> list[str]:
        cluster = self.cluster
        options = [o for o in super().options() if not o.startswith("--user=")]
        provider_options = ";".join(
            (
                f"gmcast.listen_addr=tcp://{self.group_address}",
                f"ist.recv_addr=127.0.0.1:{self.ist_port}",
                *PROVIDER_OPTIONS,
            )
        )
        return [
            *options,
            *_run_as(),
            "--wsrep-on=ON",
            f"--wsrep-provider={GALERA_PROVIDER}",
            f"--wsrep-cluster-name={cluster.name}",
            f"--wsrep-cluster-address=gcomm://{','.join(cluster.group_addresses)}",
            f"--wsrep-node-name={self.name}",
            f"--wsrep-node-address={self.group_address}",
            f"--wsrep-provider-options={provider_options}",
            "--wsrep-sst-method=rsync",
            f"--wsrep-sst-receive-address=127.0.0.1:{self.sst_port}",
            # What Galera requires: row events, InnoDB, and interleaved auto-increment locks
            # (no table-level AUTO-INC lock for its parallel appliers to wait on).
            "--binlog-format=ROW",
            "--default-storage-engine=InnoDB",
            "--innodb-autoinc-lock-mode=2",
            *(["--wsrep-new-cluster"] if self.bootstrap else []),
            *([f"--wsrep-start-position={self.start_position}"] if self.start_position else []),
            *(["--wsrep-log-conflicts=ON"] if KEEP else []),
        ]

    @property
    def grastate(self) -> Path:
        return self.datadir / "grastate.dat"

    def start(self, template: Path | None = None, timeout: float = 120) -> GaleraNode:
        if not self.datadir.exists():
            self.make_datadir(template)
        self.tmpdir.mkdir(exist_ok=True)
        _give_to_server(self.root)
        self.start_position = self._recover_position(timeout)
        try:
            super().start(timeout=timeout)
        finally:
            self.start_position = None
        self.bootstrap = False
        return self

    def _recover_position(self, timeout: float) -> str | None:
        """After a crash ``grastate.dat`` says seqno -1: the node does not know how far it got,
        and would ask for a whole new copy (SST). As a packaged server's ``galera_recovery``
        does, read the position from InnoDB (``--wsrep-recover``) and start from it, so that the
        node receives only the writes it missed (IST)."""
        if not self.grastate.exists():
            return None
        state = dict(
            line.split(":", 1)
            for line in self.grastate.read_text().splitlines()
            if ":" in line and not line.startswith("#")
        )
        if state.get("seqno", "").strip() != "-1":
            return None
        log = self.root / "recover.log"
        subprocess.run(
            [MARIADBD, *self.options(), "--wsrep-recover", f"--log-error={log}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
        found = re.findall(r"WSREP: Recovered position: (\S+:-?\d+)", _read(log))
        log.unlink(missing_ok=True)
        return found[-1] if found and not found[-1].endswith(":-1") else None

    def status(self, *names: str) -> dict[str, str]:
        """wsrep status variables by name (all of them without names)."""
        rows = self.query("SHOW GLOBAL STATUS LIKE 'wsrep%'")
        values = {row["Variable_name"]: row["Value"] for row in rows}
        return {name: values.get(name, "") for name in names} if names else values

    def state(self) -> str:
        """``wsrep_local_state_comment`` (Synced, Donor/Desynced, Joining, Initialized...),
        or "down" when the node does not answer."""
        if self.process is None or self.process.poll() is not None:
            return "down"
        try:
            return self.status("wsrep_local_state_comment")["wsrep_local_state_comment"]
        except Exception:
            return "down"

    def synced(self, size: int) -> bool:
        try:
            status = self.status("wsrep_local_state_comment", "wsrep_cluster_size", "wsrep_ready")
        except Exception:
            return False
        return (
            status["wsrep_local_state_comment"] == "Synced"
            and status["wsrep_ready"] == "ON"
            and status["wsrep_cluster_size"] == str(size)
        )

    def last_state_transfer(self) -> str:
        """How the node last received the cluster's state, from its log: "IST" (the writes it
        missed), "SST" (a whole copy of a donor's datadir) or "" (never)."""
        found = re.findall(r"rsync ([IS]ST) completed on joiner", _read(self.log_path))
        return found[-1] if found else ""

    def restart(self, timeout: float = 120) -> GaleraNode:
        """Stop the node if it runs (gracefully), start it again: it rejoins the cluster (IST,
        or SST when the writes it missed are gone from the donor's gcache) and is Synced."""
        self.stop(remove=False)
        self.start(timeout=timeout)
        self.cluster.wait_synced(timeout)
        return self


class GaleraCluster:
    """``nodes`` :class:`GaleraNode` s of one cluster; ``urls(db)`` lists their addresses."""

    def __init__(self, nodes: int = 3, buffer_pool: str = "64M", name: str | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="schemaless-galera-"))
        self.name = name or self.root.name
        self.nodes = [
            GaleraNode(self, self.root, f"node{number}", buffer_pool)
            for number in range(1, nodes + 1)
        ]

    @property
    def template(self) -> Path:
        return self.root / "template"

    @property
    def group_addresses(self) -> list[str]:
        return [node.group_address for node in self.nodes]

    def urls(self, database: str, **options: str) -> list[str]:
        return [node.url(database, **options) for node in self.nodes]

    def running(self) -> list[GaleraNode]:
        return [node for node in self.nodes if node.process and node.process.poll() is None]

    def start(self, timeout: float = 120) -> GaleraCluster:
        if not Path(GALERA_PROVIDER).exists():
            raise ServerError(f"{GALERA_PROVIDER} not found; install galera-4")
        if not Path(SST_SCRIPT).exists():
            raise ServerError(f"{SST_SCRIPT} not found; install mariadb-server")
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(SERVER_USER)
            except KeyError:
                raise ServerError(f"no {SERVER_USER} user; install mariadb-server") from None
        install_datadir(self.template)
        _give_to_server(self.root, recursive=False)
        first, *others = self.nodes
        first.bootstrap = True
        first.start(timeout=timeout)
        # One joiner at a time: a donor serves one rsync transfer at once, and a second joiner
        # would only wait for it.
        for node in others:
            node.start(timeout=timeout)
            self.wait_synced(timeout, size=len(self.running()))
        self.wait_synced(timeout)
        return self

    def wait_synced(self, timeout: float = 120, size: int | None = None) -> None:
        """Wait until every node runs, is Synced and sees a cluster of ``size`` (all nodes)."""
        size = len(self.nodes) if size is None else size
        deadline = time.monotonic() + timeout
        while True:
            nodes = self.running()
            if len(nodes) == size and all(node.synced(size) for node in nodes):
                return
            if time.monotonic() > deadline:
                states = {node.name: node.state() for node in self.nodes}
                raise ServerError(f"Galera cluster not Synced at {size} nodes: {states}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every node and remove the cluster's directory."""
        for node in reversed(self.nodes):
            node.stop(remove=False)
        remove_dir(self.root)


def start_galera_cluster(nodes: int = 3, buffer_pool: str = "64M") -> GaleraCluster:
    """Start a cluster of ``nodes`` Synced nodes on loopback; it stops at interpreter exit."""
    cluster = GaleraCluster(nodes, buffer_pool=buffer_pool)
    atexit.register(cluster.stop)
    try:
        return cluster.start()
    except Exception:
        cluster.stop()
        raise


def _run_as() -> list[str]:
    """As root, nodes run as the ``mysql`` user, as a packaged server does: the rsync daemon
    that receives a state transfer, started as root, would become ``nobody`` and could not
    write the joiner's datadir. Otherwise they run as whoever starts them."""
    return [f"--user={SERVER_USER}"] if os.geteuid() == 0 else []


def _give_to_server(path: Path, recursive: bool = True) -> None:
    if os.geteuid() != 0:
        return
    account = pwd.getpwnam(SERVER_USER)
    # The temporary directory is root's alone (0700); the server must reach its node's files.
    path.chmod(0o755)
    paths = [path, *path.rglob("*")] if recursive else [path]
    for item in paths:
        os.chown(item, account.pw_uid, account.pw_gid, follow_symlinks=False)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""

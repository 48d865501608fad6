"""The throwaway store of a history run: the metadata and ``shard_0`` on a first server,
``shard_1`` on a second (or, with ``galera=True``, on a three-node Galera cluster reached
through ``galera://``), and ``shard_2``, which owns no buckets, on a third server for the
moves. :meth:`HistoryStore.env` is the environment that points a process's Django
(:mod:`.settings`) at it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ...config.dburls import databases_from_urls
from ..galera import GaleraCluster, GaleraNode, start_galera_cluster
from ..mariadb import MariaDBServer, start_servers

LAYOUT: dict[str, Any] = {"shard_0": "0-2047", "shard_1": "2048-4095", "shard_2": []}
DATABASE_NAMES = ("meta", "shard0", "shard1", "shard2")
# A killed server is given up on quickly; a slow statement is not cut short by the client.
TIMEOUTS = {"connect_timeout": "2", "read_timeout": "30", "write_timeout": "30"}
ROOT = Path(__file__).resolve().parents[3]


class HistoryStore:
    """Started by :meth:`start`, stopped (and removed) by :meth:`stop`."""

    def __init__(self, galera: bool = False) -> None:
        self.galera = galera
        self.servers: list[MariaDBServer] = []  # the plain servers, by role: first, (second,) third
        self.cluster: GaleraCluster | None = None
        self.databases: dict[str, Any] = {}

    def start(self) -> HistoryStore:
        self.servers = start_servers(2 if self.galera else 3)
        first, *rest = self.servers
        homes: list[Any] = [first, first]
        if self.galera:
            self.cluster = start_galera_cluster(3)
            homes += [self.cluster.nodes[0], rest[0]]
        else:
            homes += rest
        for home, name in zip(homes, DATABASE_NAMES, strict=True):
            home.query(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        urls = [
            home.url(name, **TIMEOUTS) for home, name in zip(homes, DATABASE_NAMES, strict=True)
        ]
        if self.cluster is not None:
            nodes = ",".join(f"127.0.0.1:{node.port}" for node in self.cluster.nodes)
            query = "&".join(f"{k}={v}" for k, v in {**TIMEOUTS, "connect_timeout": "1"}.items())
            urls[2] = f"galera://root@{nodes}/shard1?{query}"

        self.databases = databases_from_urls(urls[0], urls[1:])
        if self.cluster is not None:
            # Reads that see every acknowledged commit through any node, as the checker
            # assumes: without it a read through another node than the writer's (after a
            # failover) may miss a commit, the documented limit (docs/replicas.md, "Limits").
            options = self.databases["shard_1"].setdefault("OPTIONS", {})
            mode = options.get("init_command", "SET sql_mode='STRICT_TRANS_TABLES'")
            options["init_command"] = f"{mode}, wsrep_sync_wait = 1"
        return self

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DJANGO_SETTINGS_MODULE"] = "schemaless_store.testing.history.settings"
        env["SCHEMALESS_HISTORY_DATABASES"] = json.dumps(self.databases, default=str)
        env["SCHEMALESS_HISTORY_SHARDS"] = json.dumps(LAYOUT)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        return env

    def every_server(self) -> list[MariaDBServer]:
        """Every server and node holding a database of the store."""
        nodes: list[GaleraNode] = self.cluster.nodes if self.cluster is not None else []
        return [*self.servers, *nodes]

    def spawn(self, *args: str, **popen: Any) -> subprocess.Popen[str]:
        """``python -m ARGS`` with this store's settings."""
        return subprocess.Popen(
            [sys.executable, "-m", *args], cwd=ROOT, env=self.env(), text=True, **popen
        )

    def manage(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """A management command in a process of its own (``python -m django ...``)."""
        return subprocess.run(
            [sys.executable, "-m", "django", *args],
            cwd=ROOT,
            env=self.env(),
            text=True,
            capture_output=True,
            timeout=timeout,
            check=False,
        )

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        for server in self.servers:
            server.stop()

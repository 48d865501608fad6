"""The throwaway store of a history run: the metadata and ``shard_0`` on a first server,
``shard_1`` on a second (or, with ``galera=True``, on a three-node Galera cluster reached
through ``galera://``), and ``shard_2``, which owns no buckets, on a third server for the
moves, and a ``redis-server`` for the entity cache and its near cache.
:meth:`HistoryStore.env` is the environment that points a process's Django (:mod:`.settings`)
at it: as ``root`` for the runner and the movers (migrations and moves need DDL and the fence's
grants); as the application user ``app`` for the clients, which holds only the grants
docs/deployment.md ("Database users") tells operators to give (:data:`USERS`); the client that
runs ``map_entities`` (``p0``) as ``mapper``, which also has the ``CREATE`` those docs say a
``map_entities`` run needs.
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
from ..redis import RedisServer

LAYOUT: dict[str, Any] = {"shard_0": "0-2047", "shard_1": "2048-4095", "shard_2": []}
DATABASE_NAMES = ("meta", "shard0", "shard1", "shard2")
# A killed server is given up on quickly; a slow statement is not cut short by the client.
TIMEOUTS = {"connect_timeout": "2", "read_timeout": "30", "write_timeout": "30"}
ROOT = Path(__file__).resolve().parents[3]
# The application's users (docs/deployment.md, "Database users"), by name: the password and
# the grants on each database of the store. ``app``: data statements, nothing else (no DDL,
# no PROCESS or CONNECTION ADMIN: its own sessions it may see and end without them).
# ``mapper``: also CREATE, which map_entities needs (CREATE TABLE IF NOT EXISTS on every run).
USERS = {
    "app": ("app-history", "SELECT, INSERT, UPDATE, DELETE"),
    "mapper": ("mapper-history", "SELECT, INSERT, UPDATE, DELETE, CREATE"),
}


class HistoryStore:
    """Started by :meth:`start`, stopped (and removed) by :meth:`stop`."""

    def __init__(self, galera: bool = False) -> None:
        self.galera = galera
        self.servers: list[MariaDBServer] = []  # the plain servers, by role: first, (second,) third
        self.cluster: GaleraCluster | None = None
        self.databases: dict[str, Any] = {}
        self.redis: RedisServer | None = None
        # The clients' read_timeout, when shorter than the servers' default (the lock-wait
        # nemesis holds row locks for longer than it).
        self.client_read_timeout: int | None = None

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
        for home in {id(home): home for home in homes}.values():
            self.add_users(
                home, [n for h, n in zip(homes, DATABASE_NAMES, strict=True) if h is home]
            )
        self.redis = RedisServer().start()
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

    @staticmethod
    def add_users(home: MariaDBServer, names: list[str]) -> None:
        for user, (password, grants) in USERS.items():
            for host in ("127.0.0.1", "localhost"):
                home.query(f"CREATE USER '{user}'@'{host}' IDENTIFIED BY %s", [password])
                for name in names:
                    home.query(f"GRANT {grants} ON {name}.* TO '{user}'@'{host}'")

    def env(self, user: str = "root") -> dict[str, str]:
        """The environment of a process on this store, connecting as ``user`` (root, or one
        of :data:`USERS`)."""
        databases = json.loads(json.dumps(self.databases, default=str))
        if user != "root":
            for database in databases.values():
                database["USER"], database["PASSWORD"] = user, USERS[user][0]
                if self.client_read_timeout is not None:
                    options = database.setdefault("OPTIONS", {})
                    options["read_timeout"] = self.client_read_timeout
        env = dict(os.environ)
        env["DJANGO_SETTINGS_MODULE"] = "schemaless_store.testing.history.settings"
        env["SCHEMALESS_HISTORY_DATABASES"] = json.dumps(databases)
        if self.redis is not None:
            env["SCHEMALESS_HISTORY_REDIS"] = self.redis.url
        env["SCHEMALESS_HISTORY_SHARDS"] = json.dumps(LAYOUT)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        return env

    def every_server(self) -> list[MariaDBServer]:
        """Every server and node holding a database of the store."""
        nodes: list[GaleraNode] = self.cluster.nodes if self.cluster is not None else []
        return [*self.servers, *nodes]

    def spawn(self, *args: str, user: str = "root", **popen: Any) -> subprocess.Popen[str]:
        """``python -m ARGS`` with this store's settings, connecting as ``user``."""
        return subprocess.Popen(
            [sys.executable, "-m", *args], cwd=ROOT, env=self.env(user), text=True, **popen
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
        if self.redis is not None:
            self.redis.stop()
        if self.cluster is not None:
            self.cluster.stop()
        for server in self.servers:
            server.stop()

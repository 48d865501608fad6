"""The Galera cluster as the tests take it (conftest.py's ``galera_cluster`` starts one per
module): with a database of the module's created (:func:`cluster_with_database`), or whole
again for each test (:func:`whole_cluster`), and :class:`GaleraHome`, a store shard on it."""

from __future__ import annotations

from typing import Any

import pytest

from schemaless_store.testing.galera import GaleraCluster

# A grown store's shards with the cluster as the third: half the buckets on the cluster, a
# quarter on each of the suite's two servers.
LAYOUT = {"shard_0": "0-1023", "shard_1": "1024-2047", "shard_2": "2048-4095"}


def cluster_with_database(database: str, *statements: str) -> Any:
    """A module fixture: the module's cluster, ``database`` created on it and ``statements``
    run (through the first node). Assign it to the module's ``cluster``."""

    @pytest.fixture(scope="module")
    def cluster(galera_cluster: GaleraCluster) -> GaleraCluster:
        galera_cluster.nodes[0].query(f"CREATE DATABASE {database}")
        for statement in statements:
            galera_cluster.nodes[0].query(statement)
        return galera_cluster

    return cluster


def whole_cluster() -> Any:
    """A fixture: the module's cluster, each test getting it whole (a node a test killed and
    left down is restarted, and all three are synced). Assign it to the module's ``cluster``."""

    @pytest.fixture
    def cluster(galera_cluster: GaleraCluster) -> GaleraCluster:
        for node in galera_cluster.nodes:
            if node.state() == "down":
                node.restart()
        galera_cluster.wait_synced(size=3)
        return galera_cluster

    return cluster


class GaleraHome:
    """Where GrownStore puts its third shard: the cluster, through every node's address."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.port = cluster.nodes[0].port  # tests.support.restored._sql creates the database here

    def url(self, name: str, **options: str) -> str:
        nodes = ",".join(f"127.0.0.1:{node.port}" for node in self.cluster.nodes)
        # One second to give up on a dead node and try the next.
        query = "&".join(f"{k}={v}" for k, v in {**options, "connect_timeout": "1"}.items())
        return f"galera://root@{nodes}/{name}?{query}"


def rows_on(node: Any, database: str) -> int:
    """The rows of ``database``'s ``entities`` as ``node`` holds them."""
    return int(node.query(f"SELECT COUNT(*) AS n FROM {database}.entities")[0]["n"])

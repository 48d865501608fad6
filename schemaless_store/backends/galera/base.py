"""``ENGINE = "schemaless_store.backends.galera"``: Django's MySQL backend, connecting to the
first **synced** node of a Galera cluster from a list (docs/replicas.md, "Galera").

``OPTIONS["nodes"]`` lists the cluster's nodes as ``"host:port"``, in order of preference
(``dburls.database_from_url`` builds it from ``galera://user@host1:3306,host2:3306/db``). Each
new connection tries them in that order and takes the first that answers and reports
``wsrep_ready = ON`` (a node that is joining, a donor or cut off from the cluster's primary
component does not serve queries). Every process therefore writes through the same node while it
is up, which keeps the store's row locks meaningful (Galera's locks are local to a node; writes
through two nodes meet only at certification, as error 1213, which the store retries). When that
node dies, the broken connections fail once (a read is repeated at once, a write raises
``ShardUnavailable`` unless it is retried), and the next connection goes to the next synced
node: failover takes about one ``connect_timeout`` plus Galera's own suspicion timeout.

Everything else is Django's MySQL backend: the store sees MariaDB's dialect
(:mod:`...sql.dialects`).
"""

from __future__ import annotations

import logging
from typing import Any

import MySQLdb
from django.db.backends.mysql import base

from ...config.dburls import parse_nodes
from ...sql import sessions
from ...sql.server_errors import CR_CONN_HOST_ERROR

logger = logging.getLogger("schemaless_store.galera")


class NoSyncedNode(MySQLdb.OperationalError):
    """No node of the list answered as a synced member of the cluster. Its first argument is
    2003 (can't connect), so the store treats it as a shard that is down."""


class DatabaseWrapper(base.DatabaseWrapper):
    display_name = "MariaDB Galera"

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        default_port = int(params.get("port", 3306))
        nodes = parse_nodes(params.pop("nodes", None), default_port)
        if not nodes:
            nodes = [(params.get("host", "127.0.0.1"), default_port)]
        params["nodes"] = nodes
        return params

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        params = dict(conn_params)
        nodes = params.pop("nodes")
        failures = []
        for host, port in nodes:
            try:
                connection = super().get_new_connection({**params, "host": host, "port": port})
            except MySQLdb.OperationalError as exc:
                failures.append(f"{host}:{port}: {exc}")
                continue
            try:
                cursor = connection.cursor()
                ready = sessions.galera_ready(cursor)
                cursor.close()
            except MySQLdb.Error as exc:
                ready = None
                failures.append(f"{host}:{port}: {exc}")
            if ready is not None and ready.upper() == "ON":
                if failures:
                    logger.warning(
                        "galera %s: connected to %s:%s after %s",
                        self.alias,
                        host,
                        port,
                        "; ".join(failures),
                    )
                setattr(connection, sessions.NODE, (host, port))  # its sessions' node
                return connection
            if ready is not None:
                failures.append(f"{host}:{port}: wsrep_ready is {ready}")
            connection.close()
        raise NoSyncedNode(
            CR_CONN_HOST_ERROR, f"no synced Galera node answered: {'; '.join(failures)}"
        )

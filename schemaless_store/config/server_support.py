"""Which servers the store runs on: MariaDB, at least as new as the oldest the suite tests.

The store speaks MariaDB's own SQL (its GTIDs for read-your-writes on replicas, Galera's wsrep
for clusters as shards, ``VALUES`` table constructors), which MySQL lacks or spells otherwise.
A store pointed at MySQL, or at an older MariaDB, is refused by name twice over
(docs/checks.md, ``schemaless.E007``):

- at ``manage.py check --database ALIAS``, ``migrate`` and ``migrateall`` (Django's convention
  for checks that connect: only for the databases named), before anything is created;
- when a connection of the store opens (:func:`refuse_unsupported`, a ``connection_created``
  receiver), so a process that skipped the checks fails with the same sentence, never with an
  SQL error on its first write.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import BaseDatabaseWrapper

from ..exceptions import ConfigurationError
from . import conf

# The oldest MariaDB the suite runs on (Debian 12's mariadb-server; docker-compose.yml).
OLDEST_MARIADB = (10, 11)
# What the store asks of the server that MySQL lacks, named by the check (schemaless.E007).
MARIADB_FEATURES = (
    "MariaDB's GTIDs (@@last_gtid, @@gtid_slave_pos, MASTER_GTID_WAIT: read-your-writes on "
    "replicas) and Galera's wsrep (clusters as shards); no MySQL server is tested"
)
HINT = "point {alias!r} at a MariaDB {oldest} or later server; it uses MariaDB's own SQL: {needs}"

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


class UnsupportedServer(ImproperlyConfigured):
    """A database of the store is MySQL, or a MariaDB older than :data:`OLDEST_MARIADB`."""

    def __init__(self, alias: str, problem: str) -> None:
        super().__init__(f"{problem} (schemaless.E007); {hint(alias)}")
        self.problem = problem


def refusal(alias: str, mariadb: bool, version: tuple[int, ...]) -> str | None:
    """Why ``alias``'s server cannot serve the store, or None when it can."""
    if mariadb and tuple(version) >= OLDEST_MARIADB:
        return None
    server = f"{'MariaDB' if mariadb else 'MySQL'} {'.'.join(map(str, version))}"
    return f"database {alias!r} is {server}: the store needs MariaDB >= {oldest()}"


def hint(alias: str) -> str:
    return HINT.format(alias=alias, oldest=oldest(), needs=MARIADB_FEATURES)


def oldest() -> str:
    return ".".join(map(str, OLDEST_MARIADB))


def parse_server_info(info: str) -> tuple[bool, tuple[int, ...]]:
    """(is MariaDB, version) from the driver's server string, e.g. ``10.11.19-MariaDB-0+deb12u1``
    (read from the handshake: no statement)."""
    if info.startswith("5.5.5-"):  # MariaDB's prefix for old replication clients
        info = info[len("5.5.5-") :]
    match = _VERSION.search(info)
    version = tuple(int(part) for part in match.groups()) if match else (0, 0, 0)
    return "mariadb" in info.lower(), version


def refuse_unsupported(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """``connection_created`` receiver: a store connection to an unsupported server raises
    :class:`UnsupportedServer` as it opens. It reads the handshake's server string: no
    statement, nothing on other aliases."""
    if connection.vendor != "mysql":
        return
    try:
        if connection.alias not in store_aliases():
            return
    except ConfigurationError:
        return  # schemaless.E001 says what is wrong
    mariadb, version = parse_server_info(connection.connection.get_server_info())
    problem = refusal(connection.alias, mariadb, version)
    if problem is not None:
        connection.close()
        raise UnsupportedServer(connection.alias, problem)


def store_aliases() -> set[str]:
    """The databases of the store: ``default``, the shards and their replicas."""
    resolved = conf.get()
    aliases = {"default", *resolved.shards}
    for replicas in resolved.replicas.values():
        aliases.update(replicas)
    return aliases & set(settings.DATABASES)

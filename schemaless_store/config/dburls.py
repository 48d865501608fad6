"""Build ``DATABASES`` entries from URLs (django-environ), with the options the store relies on.

``databases_from_urls(meta_url, shard_urls)`` gives ``{"default": ..., "shard_0": ..., ...}``.
MariaDB entries get utf8mb4, READ COMMITTED, strict mode and bounded timeouts; SQLite
entries get WAL and ``BEGIN IMMEDIATE`` transactions. Anything given in a URL's query string
(``?connect_timeout=2``) overrides these defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import environ

MYSQL_OPTIONS: dict[str, Any] = {
    "charset": "utf8mb4",
    # READ COMMITTED: a SELECT ... FOR UPDATE on a missing id takes no gap lock, so concurrent
    # creates do not deadlock each other.
    "isolation_level": "read committed",
    "init_command": "SET sql_mode='STRICT_TRANS_TABLES'",
    # A shard that is down must fail fast with an error naming it, not hang a request.
    "connect_timeout": 5,
    "read_timeout": 30,
    "write_timeout": 30,
}

SQLITE_OPTIONS: dict[str, Any] = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}

_INT_OPTIONS = ("connect_timeout", "read_timeout", "write_timeout", "timeout")


GALERA_ENGINE = "schemaless_store.backends.galera"


def database_from_url(url: str) -> dict[str, Any]:
    """One ``DATABASES`` entry from a URL, with the store's default options filled in.

    ``galera://user:password@node1:3306,node2:3306,node3:3306/db`` is a Galera cluster reached
    through its nodes, the first synced one in that order (``schemaless_store.backends.galera``,
    docs/replicas.md)."""
    if url.startswith("galera://"):
        return _galera_from_url(url)
    config = environ.Env.db_url_config(url)
    options = config.setdefault("OPTIONS", {})
    for key in _INT_OPTIONS:
        if isinstance(options.get(key), str) and options[key].isdigit():
            options[key] = int(options[key])
    engine = config["ENGINE"]
    if engine.endswith("mysql"):
        config["OPTIONS"] = {**MYSQL_OPTIONS, **options}
        config.setdefault("TEST", {}).update({"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_bin"})
    elif engine.endswith("sqlite3"):
        config["OPTIONS"] = {**SQLITE_OPTIONS, **options}
        name = config.get("NAME", "")
        if name and name != ":memory:":
            Path(name).parent.mkdir(parents=True, exist_ok=True)
            # File test databases, beside the real ones: shards are opened by several
            # connections (and processes), which an in-memory database cannot serve.
            path = Path(name)
            config.setdefault("TEST", {})["NAME"] = str(path.with_name(f"test_{path.name}"))
    return config


def _galera_from_url(url: str) -> dict[str, Any]:
    rest = url[len("galera://") :]
    credentials, at, location = rest.rpartition("@")
    hosts, slash, tail = location.partition("/")
    nodes = [node for node in hosts.split(",") if node.strip()]
    if not nodes or not slash:
        raise ValueError(
            f"a Galera URL is galera://user@node1:3306,node2:3306/database, not {url!r}"
        )
    config = database_from_url(f"mysql://{credentials}{at}{nodes[0]}/{tail}")
    config["ENGINE"] = GALERA_ENGINE
    config["OPTIONS"]["nodes"] = [node.strip() for node in nodes]
    return config


def databases_from_urls(meta_url: str, shard_urls: list[str]) -> dict[str, dict[str, Any]]:
    """``DATABASES`` with ``default`` (metadata) and ``shard_0`` .. ``shard_N-1``."""
    databases = {"default": database_from_url(meta_url)}
    for number, url in enumerate(shard_urls):
        databases[f"shard_{number}"] = database_from_url(url)
    return databases


def replicas_from_urls(specs: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """Read replicas given as ``"shard_0=mysql://host/db"`` (one entry per replica; a shard may
    have several): their ``DATABASES`` entries (``shard_0_replica_0``, ...) and the
    ``SCHEMALESS["REPLICAS"]`` dict that names them (docs/replicas.md)."""
    databases: dict[str, dict[str, Any]] = {}
    replicas: dict[str, list[str]] = {}
    for spec in specs:
        shard, sep, url = spec.partition("=")
        shard = shard.strip()
        if not sep or not shard or "://" in shard:
            raise ValueError(f"a replica is given as 'shard_0=mysql://host/db', not {spec!r}")
        names = replicas.setdefault(shard, [])
        alias = f"{shard}_replica_{len(names)}"
        names.append(alias)
        databases[alias] = database_from_url(url.strip())
    return databases, replicas


def embedded_urls(data_dir: Path, shards: int = 2) -> tuple[str, list[str]]:
    """The zero-configuration default: SQLite files in ``data_dir``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    meta = f"sqlite:///{data_dir / 'meta.sqlite3'}"
    return meta, [f"sqlite:///{data_dir / f'shard_{n}.sqlite3'}" for n in range(shards)]


def parse_nodes(nodes: Any, default_port: int = 3306) -> list[tuple[str, int]]:
    """``["h1:3306", "h2"]`` (or one comma-separated string) as ``[(host, port), ...]``."""
    if isinstance(nodes, str):
        nodes = [part for part in nodes.split(",") if part.strip()]
    found = []
    for node in nodes or []:
        host, _, port = str(node).strip().rpartition(":")
        if not host:
            host, port = port, ""
        found.append((host, int(port) if port else default_port))
    return found

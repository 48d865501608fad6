"""A second store with THREE shards, for restore tests: ``python -m tests.support.restored report``.

The suite's store has two shards (tests/settings.py). A restore onto a different number of
servers is tested on a real second deployment: fresh databases (three SQLite files beside a
metadata file, or three databases on the suite's two throwaway MariaDB servers: shard_0 and
shard_2 on the first, shard_1 on the second), used by child processes whose ``DATABASES``
name them (``SCHEMALESS_TEST_DATABASES``, as tests/support/child.py passes the parent's). The same
``INSTALLED_APPS`` declare the same indexes; ``SCHEMALESS["SHARDS"]`` is every alias but
``default``, so the buckets spread over three shards.

The child's ``report`` prints, as JSON: every entity (its shard and its properties in the
export's JSON form) and the answer of every declared index to every equality query its
entities imply (tests/support/backups.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from tests.support import child

SHARDS = 3


class RestoredStore:
    """Fresh databases for a three-shard store, migrated; :meth:`close` drops them."""

    def __init__(self, workdir: Path) -> None:
        from django.conf import settings

        from schemaless_store.config.dburls import databases_from_urls, embedded_urls

        self.workdir = workdir
        self.names: list[tuple[Any, str]] = []
        if settings.BACKEND == "mariadb":
            first, second = settings.MARIADB_SERVERS
            tag = uuid.uuid4().hex[:8]
            homes = [first, second, first]
            self.names = [(first, f"restore_{tag}_meta")] + [
                (homes[n], f"restore_{tag}_shard{n}") for n in range(SHARDS)
            ]
            for server, name in self.names:
                _sql(server, f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            urls = [server.url(name) for server, name in self.names]
            self.databases = databases_from_urls(urls[0], urls[1:])
        else:
            self.databases = databases_from_urls(*embedded_urls(workdir, shards=SHARDS))
        self.manage("migrateall", "--verbosity", "0")

    def env(self) -> dict[str, str]:
        env = child.child_env()
        env["SCHEMALESS_TEST_DATABASES"] = json.dumps(self.databases, default=str)
        return env

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", *args],
            cwd=child.ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.run("tests.support.child", "manage", *args)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done

    def report(self) -> dict[str, Any]:
        done = self.run("tests.support.restored", "report")
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    def close(self) -> None:
        for server, name in self.names:
            _sql(server, f"DROP DATABASE IF EXISTS {name}")


def _sql(server: Any, statement: str) -> None:
    import MySQLdb

    conn = MySQLdb.connect(host="127.0.0.1", port=server.port, user="root")
    try:
        conn.cursor().execute(statement)
    finally:
        conn.close()


def decoded(report: dict[str, Any]) -> dict[str, Any]:
    """The report with properties and answers as the store's values again."""
    from schemaless_store.values.jsonview import from_json

    return {
        "shards": report["shards"],
        "placement": {uuid.UUID(k): v for k, (v, _p) in report["entities"].items()},
        "entities": {
            uuid.UUID(k): {name: from_json(value) for name, value in props.items()}
            for k, (_v, props) in report["entities"].items()
        },
        "answers": {
            (name, conditions): [uuid.UUID(i) for i in ids]
            for name, conditions, ids in report["answers"]
        },
    }


# --- child side ----------------------------------------------------------------------------


def _report() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from schemaless_store.config import conf
    from schemaless_store.models import Entity
    from schemaless_store.values.jsonview import properties_to_json
    from tests.support.backups import answers

    found = {e.id: (e._state.db, e.body_properties()) for e in Entity.objects.all().iterator()}
    report = {
        "shards": list(conf.get().shards),
        "entities": {
            str(i): [alias, properties_to_json(props)] for i, (alias, props) in found.items()
        },
        "answers": [
            [name, conditions, [str(i) for i in ids]]
            for (name, conditions), ids in answers({i: p for i, (_a, p) in found.items()}).items()
        ],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    if sys.argv[1:] != ["report"]:
        raise SystemExit("usage: python -m tests.support.restored report")
    _report()

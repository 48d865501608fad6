"""The fixtures the areas share. The tests are grouped by area (tests/README.md has the map):

core, queries, cleaner, moves, replicas, cache, backup, admin, demo, reliability, commands,
house and package, with what they share that is not a fixture in ``tests/support``.

- ``_clean_index_tables`` (every test): index tables emptied after each test (Django's flush
  empties model tables only), the map and index states read again.
- ``backend``: ``"sqlite"`` or ``"mariadb"``.
- ``admin_user``: a superuser, admin / secret-pw.
- ``published_first``: an index on ``published`` alone, sharded on it (the scatter shape).
- ``posts``: 200 stored posts (``PostFactory``); a module may override it with another number.
- ``published``: a new index (``index_cleaner_published``) declared over ``posts``: its tables
  created, building, not backfilled.
- ``buckets_restored``: bucket tables restored after the test, maps read again every 50 ms
  (``schemaless_overrides`` adds settings of a module's own); for tests that move buckets.
- ``feed_site``: the demo project's URLs and templates (project/feed) over the test settings.
- ``galera_cluster`` (one per module): a three-node Galera cluster, whose stop is checked to
  leave no process and no file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.tables import lifecycle
from schemaless_store.testing.galera import GaleraCluster, start_galera_cluster
from schemaless_store.topology import bucket_map, shards
from tests.support import buckets, child
from tests.support.factories import PostFactory

# Properties are checked on generated data, never on time (speed is the benchmarks' job): no
# example fails for taking longer than hypothesis's 200 ms on a loaded machine, or a CI run
# with three test processes on two cores.
hypothesis_settings.register_profile(
    "schemaless", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("schemaless")

# The demo project's templates (project/feed renders them), for ``feed_site``.
DEMO_TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def pytest_report_header(config: pytest.Config) -> str:
    from django.conf import settings

    backend = getattr(settings, "BACKEND", "?")
    if backend == "mariadb":
        servers = ", ".join(f"{s.name} on port {s.port}" for s in settings.MARIADB_SERVERS)
        return f"schemaless_store backend: mariadb ({servers})"
    return f"schemaless_store backend: {backend}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from django.conf import settings

    if settings.BACKEND == "mariadb":
        return
    skip = pytest.mark.skip(reason="needs real MariaDB servers; the MariaDB run covers it")
    for item in items:
        if item.get_closest_marker("mariadb_only"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _clean_index_tables(request: pytest.FixtureRequest):
    """Django's flush empties model tables only; index tables are emptied here after each test."""
    uses_db = request.node.get_closest_marker("django_db") is not None
    lifecycle.forget_states()
    bucket_map.forget()
    yield
    bucket_map.forget()
    if not uses_db:
        return
    shards.close_index_connections()
    for alias in shards.shard_aliases():
        conn = connections[alias]
        with conn.cursor() as cursor:
            existing = set(conn.introspection.table_names(cursor))
            for index in registry.all():
                if index.name in existing and not index.errors:
                    cursor.execute(f"DELETE FROM {conn.ops.quote_name(index.name)}")
    lifecycle.forget_states()


@pytest.fixture
def no_receipt_pruning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The receipt pruning (one write in ``PRUNE_EVERY`` per shard, writes/receipts.py) sends
    a ``DELETE`` after a write's commit now and then: a test that compares the statements of
    writes would see one more at that write. Held off for the test."""
    from schemaless_store.writes import receipts

    monkeypatch.setattr(receipts, "PRUNE_EVERY", 10**12)


@pytest.fixture
def admin_user(django_user_model):
    """A superuser who logs in as admin / secret-pw (the browser tests)."""
    return django_user_model.objects.create_superuser("admin", "admin@example.com", "secret-pw")


@pytest.fixture
def backend() -> str:
    from django.conf import settings

    return settings.BACKEND


@pytest.fixture
def published_first():
    """An index on ``published`` alone, sharded on it: a range on ``published`` reads every
    shard (the scatter shape). Declared on an empty store, so ready."""
    from schemaless_store.config.indexes import Index

    index = Index(
        table="index_published",
        properties=["published"],
        shard_on="published",
        types={"published": "int"},
    )
    with child.declared(index):
        yield index


@pytest.fixture
def posts() -> list[Entity]:
    """200 stored posts."""
    return PostFactory.create_batch(200)


@pytest.fixture
def published(posts: list[Entity]) -> Iterator[Any]:
    """A new index over existing entities: declared, its tables created, not backfilled."""
    with child.declared("index_cleaner_published") as index:
        yield index


@pytest.fixture
def schemaless_overrides() -> dict[str, Any]:
    """Settings a module adds to ``SCHEMALESS`` under ``buckets_restored`` (override it)."""
    return {}


@pytest.fixture
def buckets_restored(schemaless_overrides: dict[str, Any]) -> Iterator[None]:
    """Bucket tables restored after the test; maps read again every 50 ms (so a move waits
    0.6 s between its moving mark and its flip)."""
    from django.conf import settings

    raw = {**settings.SCHEMALESS, "MAP_MAX_AGE": 0.05, **schemaless_overrides}
    with buckets.restored_afterwards(), override_settings(SCHEMALESS=raw):
        yield


@pytest.fixture
def feed_site(settings: Any) -> None:
    """The demo project's URLs and templates on top of the test settings."""
    settings.ROOT_URLCONF = "project.urls"
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [DEMO_TEMPLATES]}]


@pytest.fixture(scope="module")
def galera_cluster() -> Iterator[GaleraCluster]:
    """A three-node Galera cluster for the module (starting one takes ~15 s). Its stop must
    leave no process running and no file behind."""
    started = time.monotonic()
    galera = start_galera_cluster(3)
    print(f"Galera cluster started in {time.monotonic() - started:.1f}s")
    yield galera
    pids = [node.process.pid for node in galera.nodes if node.process]
    galera.stop()
    assert not galera.root.exists()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

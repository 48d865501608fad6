from __future__ import annotations

import pytest
from django.db import connections

from schemaless_store import lifecycle, shardmap, shards
from schemaless_store.indexes import registry


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
    shardmap.forget()
    yield
    shardmap.forget()
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
    from schemaless_store.indexes import Index
    from tests.support import child

    index = Index(
        table="index_published",
        properties=["published"],
        shard_on="published",
        types={"published": "int"},
    )
    with child.declared(index):
        yield index

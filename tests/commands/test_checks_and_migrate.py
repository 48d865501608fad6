from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connections
from django.test import override_settings

from schemaless_store import Index, checks
from schemaless_store.config import conf
from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.sql import sessions
from schemaless_store.tables import ddl, lifecycle
from schemaless_store.topology import shards
from tests.support import STORE


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def test_clean_configuration_has_no_errors():
    assert checks.check_settings() == []
    assert checks.check_indexes() == []


@pytest.mark.parametrize(
    ("schemaless", "expected"),
    [
        ({"SHARDS": ["shard_0", "nope"]}, "schemaless.E002"),
        ({"SHARDS": ["default", "shard_1"]}, "schemaless.E003"),
        ({"SHARDS": {"shard_0": "0-10"}}, "schemaless.E001"),
        ({"BUCKETS": 0}, "schemaless.E001"),
        ({"UNKNOWN_KEY": 1}, "schemaless.E001"),
        ({"CODEC": "no.such.Codec"}, "schemaless.E001"),
    ],
)
def test_bad_settings_are_reported(schemaless, expected):
    with override_settings(SCHEMALESS=schemaless):
        assert expected in ids(checks.check_settings())


def test_missing_router_is_reported():
    with override_settings(DATABASE_ROUTERS=[]):
        assert "schemaless.E004" in ids(checks.check_settings())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"table": "index-bad", "properties": ["a"], "shard_on": "a"},
        {"table": "index_x; DROP TABLE entities", "properties": ["a"], "shard_on": "a"},
        {"table": "index_x", "properties": ["a b"], "shard_on": "a b"},
        {"table": "index_x", "properties": ["a"], "shard_on": "b"},
        {"table": "index_x", "properties": ["entity_id"], "shard_on": "entity_id"},
        {"table": "index_x", "properties": [], "shard_on": "a"},
        {"table": "index_x", "properties": ["a", "a"], "shard_on": "a"},
        {"table": "index_x", "properties": ["a"], "shard_on": "a", "types": {"a": "varchar"}},
        {"table": "index_x", "properties": ["a"], "shard_on": "a", "types": {"b": "int"}},
        {"table": "x" * 65, "properties": ["a"], "shard_on": "a"},
    ],
)
def test_invalid_index_declarations_are_reported_and_never_used(kwargs):
    index = Index(**kwargs)
    registry.register(index, module="tests.inline")
    try:
        errors = [m for m in checks.check_indexes() if m.id == "schemaless.E101"]
        assert errors and all("tests.inline" in m.msg for m in errors)
        assert index not in registry.valid()
        with pytest.raises(Exception, match="invalid"):
            ddl.create_statements(index, "mysql", lambda n: f"`{n}`")
    finally:
        registry.unregister(index.name)


def test_duplicate_index_tables_are_reported():
    twin = Index(table="index_link", properties=["url"], shard_on="url")
    registry.register(twin, module="tests.twin")
    try:
        assert "schemaless.E102" in ids(checks.check_indexes())
    finally:
        registry.duplicates.clear()


def test_autodiscovery_found_the_test_apps_indexes():
    names = {index.name for index in registry.all()}
    assert {"index_user_id", "index_link", "index_user_published", "index_tags"} <= names
    assert registry.get("index_link").module == "tests.testapp.indexes"


@STORE
def test_an_index_declared_later_gets_its_tables_on_the_next_migrate():
    late = Index(table="index_late_title", properties=["title"], shard_on="title")
    registry.register(late)
    try:
        for alias in shards.shard_aliases():
            call_command("migrate", database=alias, verbosity=0)
        call_command("migrate", database="default", verbosity=0)
        for alias in shards.shard_aliases():
            assert "index_late_title" in connections[alias].introspection.table_names()
        assert "index_late_title" not in connections["default"].introspection.table_names()
        assert lifecycle.states(refresh=True)["index_late_title"] == lifecycle.READY  # empty store
        Entity.objects.create(title="now indexed")
        assert len(list(Entity.objects.filter_index(title="now indexed"))) == 1
    finally:
        registry.unregister(late.name)
        for alias in shards.shard_aliases():
            ddl.drop_table(alias, late.name)


@STORE
def test_migrateall_migrates_every_alias(capsys):
    call_command("migrateall", verbosity=1)
    out = capsys.readouterr().out
    for alias in ("default", *conf.get().shards):
        assert f"Migrating {alias}" in out
    assert "Migrated default and 2 shards." in out


def migrateall(*args: str) -> str:
    out = StringIO()
    call_command("migrateall", *args, stdout=out)
    return out.getvalue()


def index_line(out: str, name: str) -> str:
    (line,) = [line for line in out.splitlines() if line.split()[:1] == [name]]
    return line


@STORE
def test_migrateall_names_each_index_its_tables_and_its_state():
    out = migrateall()
    assert f"Indexes: their tables on {', '.join(shards.shard_aliases())}; their state" in out
    for index in registry.valid():
        assert index_line(out, index.name).endswith("found; ready")  # the test run's migrate
    assert "runcleaner" not in out and "dropindex" not in out


@STORE
def test_migrateall_says_how_to_backfill_a_new_index_on_a_store_with_data():
    Entity.objects.create(title="already here")
    late = Index(table="index_late_title", properties=["title"], shard_on="title")
    registry.register(late)
    try:
        out = migrateall()
        assert index_line(out, late.name).endswith("created; building")
        assert "A building index is new on a store that already holds data" in out
        assert f"\n  manage.py runcleaner --index={late.name} --once\n" in out
        assert out.count("manage.py runcleaner") == 1  # the ready ones need nothing

        again = migrateall()  # still building: the advice stays; the tables are there now
        assert index_line(again, late.name).endswith("found; building")
        assert f"manage.py runcleaner --index={late.name} --once" in again

        call_command("runcleaner", f"--index={late.name}", "--once", "--nice=0", verbosity=0)
        backfilled = migrateall()
        assert index_line(backfilled, late.name).endswith("found; ready")
        assert "runcleaner" not in backfilled
    finally:
        registry.unregister(late.name)
    try:
        retired = migrateall()  # no longer declared: retired, and how to drop it
        assert lifecycle.states(refresh=True)[late.name] == lifecycle.RETIRED
        assert "Retired (no longer declared; their tables stay until dropped" in retired
        assert f"\n  manage.py dropindex {late.name}\n" in retired
        assert not [line for line in retired.splitlines() if line.split()[:1] == [late.name]]
    finally:
        for alias in shards.shard_aliases():
            ddl.drop_table(alias, late.name)
        lifecycle.drop_retired(late.name)


@STORE
def test_migrateall_on_an_empty_store_makes_a_new_index_ready_at_once():
    late = Index(table="index_late_title", properties=["title"], shard_on="title")
    registry.register(late)
    try:
        out = migrateall()
        assert index_line(out, late.name).endswith("created; ready")
        assert "runcleaner" not in out
    finally:
        registry.unregister(late.name)
        for alias in shards.shard_aliases():
            ddl.drop_table(alias, late.name)
        lifecycle.sync_states()
        lifecycle.drop_retired(late.name)


@STORE
def test_migrateall_is_quiet_with_verbosity_0():
    assert migrateall("-v", "0") == ""


@pytest.mark.mariadb_only
@pytest.mark.django_db(databases="__all__")
def test_the_fence_check_passes_when_the_user_may_end_its_connections():
    """E008 ends a probe connection of the shard's user, as a move's fence ends the store's."""
    assert checks.check_fence_privileges(databases=["default", "shard_0", "shard_1"]) == []


@pytest.mark.mariadb_only
@pytest.mark.django_db(databases="__all__")
def test_a_user_that_may_not_end_the_stores_connections_gets_e008(monkeypatch):
    def refused(cursor, ids):
        raise DatabaseError(1095, "You are not owner of thread 42")

    monkeypatch.setattr(sessions, "kill", refused)
    found = checks.check_fence_privileges(databases=["shard_0"])
    assert [e.id for e in found] == ["schemaless.E008"]
    assert "may not end the store's other connections" in found[0].msg
    assert "not owner of thread" in found[0].msg
    assert "CONNECTION ADMIN" in found[0].hint


def test_debug_is_reported_by_the_deploy_checks_only():
    from django.core.checks.registry import registry

    assert checks.check_debug in registry.get_checks(include_deployment_checks=True)
    assert checks.check_debug not in registry.get_checks(include_deployment_checks=False)
    with override_settings(DEBUG=True):
        assert ids(checks.check_debug()) == ["schemaless.W005"]
    with override_settings(DEBUG=False):
        assert checks.check_debug() == []

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import IndexNotReady
from schemaless_store.models import CleanerCheckpoint, CleanerPass, Entity, IndexState
from schemaless_store.tables import lifecycle
from schemaless_store.topology import shards
from tests.support import STORE, child
from tests.support.raw import index_rows

pytestmark = STORE

COLOR = "index_cleaner_color"


def state(name: str) -> str | None:
    return lifecycle.states(refresh=True).get(name)


def table_exists(alias: str, name: str) -> bool:
    conn = connections[alias]
    with conn.cursor() as cursor:
        return name in conn.introspection.table_names(cursor)


@pytest.fixture
def retired_color():
    """``index_cleaner_color`` with rows, then removed from the declarations and retired (its
    tables stay until dropindex)."""
    Entity.objects.create(color="red")
    with child.declared(COLOR) as index:
        Cleaner(indexes=[COLOR], once=True).run()
        registry.unregister(COLOR)
        lifecycle.sync_states()
        assert state(COLOR) == "retired"
        yield index


# --- states ------------------------------------------------------------------------------------


def test_an_index_declared_on_an_empty_store_starts_ready():
    with child.declared(COLOR) as index:
        assert state(COLOR) == "ready"
        assert not CleanerCheckpoint.objects.exists()
        entity = Entity.objects.create(color="blue")
        assert [e.id for e in Entity.objects.filter_index(color="blue")] == [entity.id]
        assert len(index_rows(index.name)) == 1


def test_migrate_records_a_new_declaration_ready_on_an_empty_store():
    index = child.EXTRA_INDEXES[COLOR]
    registry.register(index)
    try:
        lifecycle.sync_states()  # what post_migrate runs on the metadata database
        assert state(COLOR) == "ready"
    finally:
        registry.unregister(COLOR)


def test_migrate_records_a_new_declaration_building_over_existing_entities():
    Entity.objects.create(color="red")
    index = child.EXTRA_INDEXES[COLOR]
    registry.register(index)
    try:
        lifecycle.sync_states()
        assert state(COLOR) == "building"
    finally:
        registry.unregister(COLOR)


def test_a_building_index_refuses_queries_and_says_how_to_finish():
    old = Entity.objects.create(color="red")
    with child.declared(COLOR):
        assert state(COLOR) == "building"
        new = Entity.objects.create(color="red")  # writers maintain it from the start

        with pytest.raises(IndexNotReady) as caught:
            list(Entity.objects.filter_index(color="red"))
        message = str(caught.value)
        assert f"index '{COLOR}' is building" in message
        assert f"manage.py runcleaner --index={COLOR}" in message
        assert ".allow_building()" in message

        partial = Entity.objects.filter_index(color="red").allow_building()
        assert [e.id for e in partial] == [new.id]  # the old entity is not backfilled yet

        Cleaner(indexes=[COLOR], once=True).run()
        assert state(COLOR) == "ready"
        found = {e.id for e in Entity.objects.filter_index(color="red")}
        assert found == {old.id, new.id}


def test_a_removed_declaration_is_retired_and_no_longer_maintained():
    with child.declared(COLOR) as index:
        Entity.objects.create(color="red")
        registry.unregister(COLOR)
        lifecycle.sync_states()
        assert state(COLOR) == "retired"
        Entity.objects.create(color="red")
        assert len(index_rows(index.name)) == 1  # only the row written while declared


def test_declaring_a_retired_name_again_starts_a_fresh_backfill():
    Entity.objects.create(color="red")
    with child.declared(COLOR) as index:
        Cleaner(indexes=[COLOR], once=True).run()
        assert CleanerCheckpoint.objects.filter(index_name=COLOR, done=True).count() == 2
        registry.unregister(COLOR)
        lifecycle.sync_states()
        registry.register(index)
        lifecycle.sync_states()
        assert state(COLOR) == "building"
        assert not CleanerCheckpoint.objects.filter(index_name=COLOR).exists()


def test_mark_ready_only_promotes_a_building_index():
    Entity.objects.create(color="red")
    with child.declared(COLOR):
        lifecycle.set_state(COLOR, "retired")
        assert not lifecycle.mark_ready(COLOR)
        assert state(COLOR) == "retired"
        lifecycle.set_state(COLOR, "building")
        assert lifecycle.mark_ready(COLOR)
        assert state(COLOR) == "ready"


# --- dropindex ---------------------------------------------------------------------------------


def dropindex(*args: str, answer: str | None = None, monkeypatch=None) -> str:
    if answer is not None:
        monkeypatch.setattr("builtins.input", lambda prompt: answer)
    out = io.StringIO()
    call_command("dropindex", *args, stdout=out)
    return out.getvalue()


def test_dropindex_asks_first_and_keeps_the_tables_unless_told_yes(retired_color, monkeypatch):
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "no")
    out = io.StringIO()
    call_command("dropindex", COLOR, stdout=out)

    assert "Drop cancelled; nothing was changed." in out.getvalue()
    (prompt,) = asked
    assert COLOR in prompt and "cannot be undone" in prompt and "Type 'yes'" in prompt
    assert re.search(r"shard_\d \(\d+ rows\)", prompt)
    assert all(table_exists(alias, COLOR) for alias in shards.shard_aliases())
    assert state(COLOR) == "retired"


def test_dropindex_drops_the_tables_everywhere_once_confirmed(retired_color, monkeypatch):
    out = dropindex(COLOR, answer="yes", monkeypatch=monkeypatch)

    assert f"Dropped index {COLOR} on shard_0, shard_1." in out
    assert not any(table_exists(alias, COLOR) for alias in shards.shard_aliases())
    assert state(COLOR) is None
    assert not CleanerCheckpoint.objects.filter(index_name=COLOR).exists()
    assert CleanerPass.objects.filter(index_name=COLOR).exists()  # history stays


def test_dropindex_noinput_does_not_ask(retired_color, monkeypatch):
    def no_questions(prompt):
        raise AssertionError("asked for confirmation despite --noinput")

    monkeypatch.setattr("builtins.input", no_questions)
    dropindex(COLOR, "--noinput")
    assert not any(table_exists(alias, COLOR) for alias in shards.shard_aliases())


def test_dropindex_refuses_a_declared_index():
    with pytest.raises(CommandError) as caught:
        dropindex("index_link", "--noinput")
    message = str(caught.value)
    assert "index 'index_link' is still declared (state: ready)" in message
    assert "Remove its declaration" in message and "migrateall" in message
    assert all(table_exists(alias, "index_link") for alias in shards.shard_aliases())


def test_dropindex_refuses_an_unknown_name(retired_color):
    with pytest.raises(
        CommandError, match=f"no index named 'nope' is known; retired indexes: {COLOR}"
    ):
        dropindex("nope", "--noinput")


def test_dropindex_refuses_an_undeclared_index_not_yet_retired():
    IndexState.objects.create(name="index_gone", state="ready", properties=["x"], shard_on="x")
    with pytest.raises(CommandError, match=r"is ready, not retired.*run `manage\.py migrateall`"):
        dropindex("index_gone", "--noinput")


def test_dropindex_checks_every_name_before_dropping_any(retired_color):
    with pytest.raises(CommandError, match="index_link"):
        dropindex(COLOR, "index_link", "--noinput")
    assert all(table_exists(alias, COLOR) for alias in shards.shard_aliases())

"""A kind is an entity in every other respect (docs/kinds.md#use-it): placement, the entity
cache, export and import."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.core.cache import caches
from django.test import override_settings

from schemaless_store import entity_cache
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map
from tests.kindsapp.models import Note, Tag
from tests.support import STORE, buckets
from tests.support.backups import command, export, wipe

pytestmark = STORE


def test_a_placed_kind_lives_with_its_index_rows():
    user = uuid.uuid4()
    note = Note.objects.create(placed_with="user_id", title="placed", user_id=user)
    index = Note._kind.indexes[0]
    assert note.shard == bucket_map.alias_for(
        index.routing_key(index.column_value("user_id", user))
    )
    assert [n.id for n in Note.objects.filter_index(user_id=user)] == [note.id]


def test_kinds_read_through_the_entity_cache():
    caches_setting = {
        **settings.CACHES,
        "entities": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "k"},
    }
    raw = {**settings.SCHEMALESS, "CACHE": "entities"}
    with override_settings(CACHES=caches_setting, SCHEMALESS=raw), buckets.restored_afterwards():
        caches["entities"].clear()
        entity_cache.resume()
        entity_cache.reset_stats()
        note = Note.objects.create(title="cached")
        tag = Tag.objects.create(name="t", user_id=uuid.uuid4())
        assert Note.objects.get(id=note.id).title == "cached"
        assert Note.objects.get(id=note.id).title == "cached"
        assert entity_cache.stats.hits >= 1
        try:
            Note.objects.get(id=tag.id)
            raise AssertionError("a cached tag was answered as a note")
        except Note.DoesNotExist:
            pass
        again = Note.objects.get(id=note.id)
        again.title = "changed"
        again.save()
        assert Note.objects.get(id=note.id).title == "changed"  # the write invalidated it


def test_kinds_survive_export_and_import(tmp_path):
    user = uuid.uuid4()
    note = Note.objects.create(title="kept", user_id=user, stars=5)
    tag = Tag.objects.create(name="t", user_id=user, shade=2)
    path = tmp_path / "dump.jsonl"
    export(path)
    wipe()
    assert Entity.objects.all().count() == 0
    run = command("importentities", str(path))
    assert run.error is None, run
    assert Note.objects.get(id=note.id).stars == 5
    assert Tag.objects.get(id=tag.id)["shade"] == 2
    assert [n.id for n in Note.objects.filter_index(user_id=user)] == [note.id]
    assert [t.id for t in Tag.objects.filter_index(user_id=user)] == [tag.id]


@pytest.mark.usefixtures("buckets_restored")
def test_a_kind_moves_with_its_bucket_and_its_pinned_index_rows():
    from schemaless_store.moves import plan
    from schemaless_store.moves.mover import Mover

    user = uuid.uuid4()
    source = bucket_map.current().owners[0]
    target = buckets.other_alias(source)
    note = Note.objects.create(id=buckets.id_in_bucket(5), title="moving", user_id=user)
    tag = Tag.objects.create(id=buckets.id_in_bucket(6), name="t", user_id=user)
    assert note.shard == source
    Mover(plan.start(plan.plan(target, list(range(300))))).run()
    moved = Note.objects.get(id=note.id)
    assert moved.shard == target and moved.title == "moving"
    assert [n.id for n in Note.objects.filter_index(user_id=user)] == [note.id]
    with pytest.raises(Note.DoesNotExist):
        Note.objects.get(id=tag.id)  # still a tag, on its new shard too
    moved.title = "moved"
    moved.full_clean()
    moved.save(if_unchanged=True)  # read after the move: no Conflict
    assert Note.objects.get(id=note.id).title == "moved"
    assert Entity.objects.get(id=note.id)["kind"] == Note._kind.name

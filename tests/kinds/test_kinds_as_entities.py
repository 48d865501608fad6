"""A kind is an entity in every other respect (docs/kinds.md#use-it): placement, the entity
cache, export and import."""

from __future__ import annotations

import uuid

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

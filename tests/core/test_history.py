"""Entity history (``SCHEMALESS["HISTORY"]``): every version of an entity kept as a cell."""

from __future__ import annotations

import uuid

import pytest
from django.db import connections
from django.test import override_settings

from schemaless_store.exceptions import ConfigurationError, UniqueViolation
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.support import STORE

pytestmark = STORE

HISTORY = override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})


def cell_count() -> int:
    total = 0
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM cell")
            total += cursor.fetchone()[0]
    return total


@HISTORY
def test_every_save_and_the_delete_are_versions_with_timestamps():
    entity = Entity.objects.create(title="first", n=1)
    entity["title"] = "second"
    entity.save()
    entity["n"] = 2
    entity.save()
    history = entity.history()
    assert [v.ref_key for v in history] == [1, 2, 3]
    assert [v.properties["title"] for v in history] == ["first", "second", "second"]
    assert history[0].properties == {"id": entity.id, "title": "first", "n": 1}
    assert history[-1].created_at == Entity.objects.get(id=entity.id).row_updated
    assert history[0].created_at <= history[1].created_at <= history[2].created_at
    entity.delete()
    after = entity.history()
    assert len(after) == 4 and after[-1].deleted and after[-1].properties is None
    # A new entity with the same id goes on with the same history.
    Entity.objects.bulk_put([{"id": entity.id, "title": "back"}])
    assert [v.ref_key for v in entity.history()] == [1, 2, 3, 4, 5]
    assert entity.history()[-1].properties["title"] == "back"


@HISTORY
def test_bulk_put_keeps_a_version_per_entity_and_batch():
    first = Entity.objects.bulk_put([{"title": f"t{n}"} for n in range(30)])
    Entity.objects.bulk_put([{"id": e.id, "title": e["title"] + "!"} for e in first[:10]])
    assert cell_count() == 40
    assert [v.properties["title"] for v in first[0].history()] == ["t0", "t0!"]
    assert [v.properties["title"] for v in first[20].history()] == ["t20"]


@HISTORY
def test_a_write_that_fails_leaves_no_version():
    Entity.objects.create(username="bret")
    with pytest.raises(UniqueViolation):
        Entity.objects.create(username="bret")
    assert cell_count() == 1


@HISTORY
def test_versions_live_with_the_entity():
    entity = Entity.objects.create(title="x")
    with connections[entity.shard].cursor() as cursor:
        cursor.execute("SELECT row_key, column_name FROM cell")
        assert [(bytes(k), c) for k, c in cursor.fetchall()] == [(entity.row_id, "_entity")]


def test_without_the_setting_nothing_is_kept_and_history_says_how_to_turn_it_on():
    entity = Entity.objects.create(title="x")
    entity["title"] = "y"
    entity.save()
    Entity.objects.bulk_put([{"title": "z"}])
    entity.delete()
    assert cell_count() == 0
    with pytest.raises(ConfigurationError, match=r"SCHEMALESS\['HISTORY'\] = True"):
        entity.history()


@HISTORY
def test_history_of_an_entity_that_never_existed_is_empty():
    assert Entity(id=uuid.uuid4()).history() == []

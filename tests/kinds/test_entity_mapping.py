"""``Entity`` is a full ``collections.abc.MutableMapping`` (issue 38, part 5): what a function
given to ``mapentities`` or ``modify`` can call on it."""

from __future__ import annotations

from collections.abc import ItemsView, KeysView, MutableMapping, ValuesView

import pytest
from django.db import connections

from schemaless_store.exceptions import InvalidEntityError
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.kindsapp.models import Note
from tests.support import STORE, buckets


def test_an_entity_is_a_mutable_mapping():
    entity = Entity(title="t", n=1)
    assert isinstance(entity, MutableMapping)
    assert list(entity) == ["id", "title", "n"] and len(entity) == 3
    assert list(entity.values()) == [entity.id, "t", 1]
    assert entity.pop("n") == 1 and "n" not in entity
    assert entity.pop("missing", "default") == "default"
    with pytest.raises(KeyError):
        entity.pop("missing")
    assert entity.setdefault("tags", []) == [] and entity["tags"] == []
    assert entity.setdefault("title", "other") == "t"
    entity.update({"a": 1}, b=2)
    entity.update(dict(entity))  # its own id included: nothing changes
    assert dict(entity) == {"id": entity.id, "title": "t", "tags": [], "a": 1, "b": 2}
    assert entity.popitem() == ("b", 2)
    entity.clear()
    assert dict(entity) == {"id": entity.id} and len(entity) == 1


def test_the_id_stays():
    entity = Entity(title="t")
    with pytest.raises(InvalidEntityError):
        entity.pop("id")
    with pytest.raises(InvalidEntityError):
        entity.update(id="0" * 32)
    with pytest.raises(KeyError):
        Entity().popitem()


@STORE
def test_a_stored_entity_changed_as_a_mapping_saves():
    entity = Entity.objects.create(old="x", keep=1)
    found = Entity.objects.get(id=entity.id)
    found["new"] = found.pop("old")
    found.update(keep=2)
    found.save()
    assert dict(Entity.objects.get(id=entity.id)) == {"id": entity.id, "keep": 2, "new": "x"}


def test_keys_values_and_items_are_views():
    """As a dict's: sized, live, ``in`` and (keys, items) set operations."""
    entity = Entity(title="t", n=1)
    keys, values, items = entity.keys(), entity.values(), entity.items()
    assert isinstance(keys, KeysView) and isinstance(values, ValuesView)
    assert isinstance(items, ItemsView)
    assert len(keys) == len(values) == len(items) == 3
    assert "title" in keys and "id" in keys and "x" not in keys
    assert 1 in values and ("n", 1) in items and ("n", 2) not in items
    assert keys & {"n", "x"} == {"n"} and keys - {"id"} == {"title", "n"}
    assert list(items) == [("id", entity.id), ("title", "t"), ("n", 1)]
    entity["x"] = None
    assert len(keys) == 4 and "x" in keys  # live, as a dict's views are
    assert (
        dict(entity.items()) == dict(entity) == {"id": entity.id, "title": "t", "n": 1, "x": None}
    )


@STORE
def test_equality_is_the_same_stored_entity_not_the_same_values():
    """``==`` is identity, as a Django model's (docs/usage.md): the same entity, by id,
    across shards and between a kind and a plain Entity; never by comparing properties."""
    aliases = shards.shard_aliases()[:2]
    one, two = (Entity.objects.create(id=buckets.id_on(a), title="same") for a in aliases)
    # The same row number (Django's pk) on both shards, whatever earlier tests left.
    number = max(one.added_id, two.added_id) + 1
    for entity, alias in ((one, aliases[0]), (two, aliases[1])):
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "UPDATE entities SET added_id = %s WHERE id = %s", [number, entity.id.bytes]
            )
    one, two = (Entity.objects.get(id=e.id) for e in (one, two))
    assert one.added_id == two.added_id == number
    assert one != two and len({one, two}) == 2
    again = Entity.objects.get(id=one.id)
    again["title"] = "edited"
    assert again == one and hash(again) == hash(one)  # the same entity, other values
    assert Entity(title="same") != Entity(title="same")  # two new entities, two ids
    with pytest.raises(TypeError, match="unhashable"):  # as Django's: its id may change
        hash(Entity())
    note = Note.objects.create(title="n")
    assert note == Entity.objects.get(id=note.id) == Note.objects.get(id=note.id)
    assert note != one and one != "same" and note != {"id": note.id, "title": "n"}

"""``Entity`` is a full ``collections.abc.MutableMapping`` (issue 38, part 5): what a function
given to ``mapentities`` or ``modify`` can call on it."""

from __future__ import annotations

from collections.abc import MutableMapping

import pytest

from schemaless_store.exceptions import InvalidEntityError
from schemaless_store.models import Entity
from tests.support import STORE


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

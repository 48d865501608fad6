"""Conditional writes across a move (issue 34, item 10; docs/usage.md "Saving only if
unchanged"): a move gives each moved row the target's own ``added_id``, which is no change.
``save(if_unchanged=True)`` and the admin's edit form of an entity read before its bucket
moved write after the move; a real change, before or after the move, is still a Conflict.
"""

from __future__ import annotations

import re

import pytest

from schemaless_store.exceptions import Conflict
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map
from tests.support import STORE, buckets
from tests.support.admin import CHANGE_PERMS, change_url, client_for
from tests.support.moving import MOVED, run, source_and_target

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def moved_entity(**props) -> Entity:
    """An entity in a moving bucket; the target holds others first, so that its copy gets
    another ``added_id`` than the source's."""
    _source, target = source_and_target()
    theirs = bucket_map.current().owners.index(target)
    for _ in range(3):
        Entity.objects.create(id=buckets.id_in_bucket(theirs), title="on the target")
    return Entity.objects.create(id=buckets.id_in_bucket(5), **props)


def move_its_bucket() -> None:
    _source, target = source_and_target()
    run("--to", target, "--buckets", MOVED)


def test_an_instance_read_before_a_move_saves_if_unchanged_after_it():
    entity = moved_entity(title="a", n=1)
    read = Entity.objects.get(id=entity.id)
    added_before = read.added_id
    move_its_bucket()
    assert Entity.objects.get(id=entity.id).added_id != added_before  # the target's own
    read["n"] = 2
    read.save(if_unchanged=True)
    assert Entity.objects.get(id=entity.id)["n"] == 2
    read["n"] = 3  # and again, after its own write
    read.save(if_unchanged=True)
    assert Entity.objects.get(id=entity.id)["n"] == 3


def test_a_change_after_the_move_is_still_a_conflict():
    entity = moved_entity(title="a", n=1)
    read = Entity.objects.get(id=entity.id)
    move_its_bucket()
    other = Entity.objects.get(id=entity.id)
    other["n"] = 5
    other.save()
    read["n"] = 2
    with pytest.raises(Conflict):
        read.save(if_unchanged=True)
    assert Entity.objects.get(id=entity.id)["n"] == 5


def test_a_delete_and_create_with_the_same_body_after_the_move_is_still_a_conflict():
    entity = moved_entity(title="a", n=1)
    read = Entity.objects.get(id=entity.id)
    move_its_bucket()
    Entity.objects.get(id=entity.id).delete()
    Entity.objects.create(id=entity.id, title="a", n=1)
    read["n"] = 2
    with pytest.raises(Conflict):
        read.save(if_unchanged=True)


def loaded_marker(response) -> str:
    match = re.search(r'name="loaded" value="([^"]*)"', response.content.decode())
    assert match
    return match.group(1)


def test_the_admin_edit_form_loaded_before_a_move_saves_after_it():
    entity = moved_entity(title="a")
    client = client_for(*CHANGE_PERMS)
    page = client.get(change_url(entity))
    move_its_bucket()
    data = {"body": '{"title": "mine"}', "loaded": loaded_marker(page), "_continue": "1"}
    response = client.post(change_url(entity), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Entity.objects.get(id=entity.id)["title"] == "mine"


def test_the_admin_edit_form_after_a_move_still_refuses_a_change_made_meanwhile():
    entity = moved_entity(title="a")
    client = client_for(*CHANGE_PERMS)
    page = client.get(change_url(entity))
    move_its_bucket()
    other = Entity.objects.get(id=entity.id)
    other["title"] = "someone else"
    other.save()
    data = {"body": '{"title": "mine"}', "loaded": loaded_marker(page), "_continue": "1"}
    response = client.post(change_url(entity), data)
    assert response.status_code == 200 and "changed by someone else" in response.content.decode()
    assert Entity.objects.get(id=entity.id)["title"] == "someone else"

"""The operators' admin, through Django's test client: editing and deleting an entity through
the write path (form errors write nothing, a concurrent change is refused, CSRF)."""

from __future__ import annotations

import html

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry

from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.values import index_values, jsonview
from tests.support import STORE
from tests.support.admin import (
    CHANGE_PERMS,
    CHECK,
    LIST,
    VIEW,
    change_url,
    client_for,
    link_rows,
    post_body,
    textarea,
)
from tests.support.factories import PostFactory
from tests.support.raw import index_rows
from tests.support.values import EVERY_TYPE, same

pytestmark = STORE


# --- editing ---------------------------------------------------------------------------------


def test_valid_edit_is_saved_through_the_write_path_and_logged():
    entity = PostFactory.create(link="https://old")
    client = client_for(*CHANGE_PERMS)
    page = client.get(change_url(entity))
    props = jsonview.loads(textarea(page))
    props["link"] = "https://new"
    props["extra"] = {"$bytes": "not a tag at the top"}
    del props["title"]
    response = post_body(client, entity, jsonview.dumps(props), page)
    assert response.status_code == 302 and response["Location"] == change_url(entity) + "?edit=1"
    stored = Entity.objects.get(id=entity.id)
    assert stored["link"] == "https://new" and "title" not in stored
    assert link_rows() == {(index_values.encode_key("https://new"), entity.id.bytes)}
    assert [e.id for e in Entity.objects.filter_index(link="https://new")] == [entity.id]
    log = LogEntry.objects.get()
    assert log.action_flag == CHANGE and log.object_id == str(entity.id)
    assert log.get_admin_url() == change_url(entity)
    assert "extra" in log.get_change_message() and "link" in log.get_change_message()
    history = client.get(f"{LIST}{entity.id}/history/")
    assert history.status_code == 200 and "link" in history.content.decode()


def test_every_type_survives_an_unchanged_save():
    entity = Entity.objects.create(**EVERY_TYPE)
    before = Entity.objects.get(id=entity.id).row_updated
    client = client_for(*CHANGE_PERMS)
    page = client.get(change_url(entity))
    assert same(jsonview.loads(textarea(page)), EVERY_TYPE)
    response = post_body(client, entity, textarea(page), page)
    assert response.status_code == 302
    assert Entity.objects.get(id=entity.id).row_updated == before  # nothing was written
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"title": ', "invalid JSON"),
        ('["a list"]', "not a list"),
        ('{"n": 18446744073709551616}', "cannot store"),
        ('{"when": {"$datetime": "2020-01-01T00:00:00"}}', "needs a UTC offset"),
        ('{"user_id": {"$uuid": "nope"}}', "not a UUID"),
        ('{"id": "00000000000000000000000000000000"}', "id cannot change"),
        ('{"link": {"$float": "nan"}}', "NaN cannot be indexed"),
        ('{"link": "' + "x" * 300 + '"}', "the column holds"),
    ],
)
def test_bad_edits_are_form_errors_and_write_nothing(body, message):
    entity = PostFactory.create(link="https://keep")
    client = client_for(*CHANGE_PERMS)
    response = post_body(client, entity, body)
    assert response.status_code == 200
    content = html.unescape(response.content.decode())
    assert "errornote" in content and message in content
    assert body in content  # the operator's text is kept for correcting
    assert Entity.objects.get(id=entity.id)["link"] == "https://keep"
    assert link_rows() == {(index_values.encode_key("https://keep"), entity.id.bytes)}
    assert not LogEntry.objects.exists()


def test_own_id_in_the_body_is_accepted():
    entity = Entity.objects.create(title="a")
    client = client_for(*CHANGE_PERMS)
    body = f'{{"id": {{"$uuid": "{entity.id}"}}, "title": "b"}}'
    assert post_body(client, entity, body).status_code == 302
    assert Entity.objects.get(id=entity.id).properties == {"id": entity.id, "title": "b"}


def test_edit_of_an_entity_changed_meanwhile_is_refused():
    entity = Entity.objects.create(title="a")
    client = client_for(*CHANGE_PERMS)
    page = client.get(change_url(entity))
    other = Entity.objects.get(id=entity.id)
    other["title"] = "someone else"
    other.save()
    response = post_body(client, entity, '{"title": "mine"}', page)
    assert response.status_code == 200 and "changed by someone else" in response.content.decode()
    assert Entity.objects.get(id=entity.id)["title"] == "someone else"


def test_edit_refused_when_a_write_lands_after_the_post_read_the_entity(monkeypatch):
    """The check runs under the save's row lock: a write between the view's read of the
    entity (which still matches the page) and its save is caught too."""
    from schemaless_store.admin import entity_admin

    entity = Entity.objects.create(title="a")
    client = client_for(*CHANGE_PERMS)
    page = client.get(change_url(entity))
    build = Entity.from_properties

    def racing(properties):
        other = Entity.objects.get(id=entity.id)
        other["title"] = "raced"
        other.save()
        return build(properties)

    monkeypatch.setattr(entity_admin.Entity, "from_properties", racing)
    response = post_body(client, entity, '{"title": "mine"}', page)
    monkeypatch.undo()
    assert response.status_code == 200 and "changed by someone else" in response.content.decode()
    assert Entity.objects.get(id=entity.id)["title"] == "raced"


# --- deleting ----------------------------------------------------------------------------------


def test_delete_confirms_then_removes_entity_and_index_rows():
    entity = PostFactory.create()
    keep = PostFactory.create()
    client = client_for(*VIEW, "delete_entity")
    confirm = client.get(f"{LIST}{entity.id}/delete/")
    assert confirm.status_code == 200 and "3 index rows" in confirm.content.decode()
    response = client.post(f"{LIST}{entity.id}/delete/")
    assert response.status_code == 302 and response["Location"] == LIST
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=entity.id)
    for index in registry.valid():
        assert all(row[-2] != entity.id.bytes for row in index_rows(index.name)), index.name
    assert Entity.objects.get(id=keep.id)
    log = LogEntry.objects.get()
    assert log.action_flag == DELETION and log.object_id == str(entity.id)


def test_state_changing_posts_need_csrf():
    entity = Entity.objects.create(title="a")
    client = client_for(*CHANGE_PERMS, "delete_entity", enforce_csrf=True)
    assert client.post(f"{LIST}{entity.id}/delete/").status_code == 403
    assert client.post(change_url(entity), {"body": "{}"}).status_code == 403
    assert client.post(CHECK, {"sample": "3"}).status_code == 403
    assert Entity.objects.get(id=entity.id)["title"] == "a"
    assert not LogEntry.objects.exists()

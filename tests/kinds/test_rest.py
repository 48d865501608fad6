"""The REST extra (docs/kinds.md#a-json-api), through DRF's ``APIClient``: list by the store's
cursors, filters through the kind's indexes, create, retrieve, update, delete; hostile bodies
are 400s with nothing written; anonymous and unprivileged clients cannot read or write."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from schemaless_store.models import Entity
from tests.kindsapp.models import Note, Tag
from tests.support import STORE

pytestmark = STORE


DEEP: list = []
for _level in range(150):
    DEEP = [DEEP]


def client_with(*codenames: str) -> APIClient:
    user = User.objects.create_user(f"api{uuid.uuid4().hex[:8]}", password="pw")
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def api() -> APIClient:
    return client_with("view_note", "add_note", "change_note", "delete_note", "view_tag")


def test_create_retrieve_update_delete(api):
    created = api.post("/api/notes/", {"title": "first", "stars": 4}, format="json")
    assert created.status_code == 201, created.content
    ident = created.json()["id"]
    assert Entity.objects.get(id=ident)["kind"] == "note"
    got = api.get(f"/api/notes/{ident}/").json()
    assert got["title"] == "first" and got["stars"] == 4 and got["color"] == "red"
    assert api.patch(f"/api/notes/{ident}/", {"stars": 5}, format="json").status_code == 200
    assert Note.objects.get(id=ident).stars == 5
    put = api.put(
        f"/api/notes/{ident}/", {"title": "whole", "stars": 1, "color": "blue"}, format="json"
    )
    assert put.status_code == 200 and Note.objects.get(id=ident).color == "blue"
    assert api.delete(f"/api/notes/{ident}/").status_code == 204
    assert api.get(f"/api/notes/{ident}/").status_code == 404
    tag = Tag.objects.create(name="t", user_id=uuid.uuid4())
    assert api.get(f"/api/notes/{tag.id}/").status_code == 404  # another kind's id
    assert api.get("/api/notes/not-an-id/").status_code == 404


def test_list_pages_by_signed_cursor_and_filters_through_indexes(api):
    user = uuid.uuid4()
    for n in range(5):
        Note.objects.create(title=f"n{n}", user_id=user if n % 2 else None)
    Tag.objects.create(name="t", user_id=user)
    first = api.get("/api/notes/", {"size": 2}).json()
    assert len(first["results"]) == 2 and first["next"]
    seen = [r["title"] for r in first["results"]]
    url = first["next"]
    while url:
        page = api.get(url).json()
        seen += [r["title"] for r in page["results"]]
        url = page["next"]
    assert sorted(seen) == [f"n{n}" for n in range(5)]
    mine = api.get("/api/notes/", {"user_id": str(user)}).json()["results"]
    assert sorted(r["title"] for r in mine) == ["n1", "n3"]
    assert api.get("/api/notes/", {"cursor": "forged"}).status_code == 400
    assert api.get("/api/notes/", {"body": "x"}).status_code == 400  # no index serves it
    assert api.get("/api/notes/", {"nothing": "x"}).status_code == 400
    assert api.get("/api/notes/", {"size": "100000"}).status_code == 400


@pytest.mark.parametrize(
    "body",
    [
        {"title": "x", "stars": "many"},
        {"title": "x", "stars": 99},
        {"title": "", "stars": 3},
        {"title": "x" * 5000},
        {"title": "x", "color": "green"},
        {"title": "x", "link": "javascript:alert(1)"},
        {"title": "x", "user_id": "not-a-uuid"},
        {"title": "x", "mood": "sunny"},  # undeclared, on a forbid kind
        {"title": "x", "data": {"big": 2**70}},  # the body cannot hold it
        {"title": "x", "data": DEEP},  # nor this: lists nested past the codec's 100 levels
        {"title": ["a", "list"]},
        {"title": {"a": "dict"}},
    ],
)
def test_a_hostile_body_is_a_400_and_nothing_is_written(api, body):
    response = api.post("/api/notes/", body, format="json")
    assert response.status_code == 400, response.content
    assert Entity.objects.all().count() == 0


def test_a_taken_unique_value_is_a_400(api):
    """The error names the field, not the entity that holds the value (which would let a
    writer map values to ids)."""
    created = api.post("/api/notes/", {"title": "once"}, format="json")
    assert created.status_code == 201
    response = api.post("/api/notes/", {"title": "once"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"title": ["Note with this Title already exists."]}
    assert created.json()["id"] not in response.content.decode()
    assert Note.objects.all().count() == 1


@pytest.mark.parametrize("method", ["patch", "put"])
def test_a_hostile_update_changes_nothing(api, method):
    """Each refused update leaves the stored entity as it was before it, every field (and
    the row itself: not even rewritten), also where the body's other fields were valid."""
    note = Note.objects.create(
        title="kept", stars=2, body="text", color="blue", data={"a": [1]}, user_id=uuid.uuid4()
    )
    before = Entity.objects.get(id=note.id)
    assert set(before) >= {"title", "stars", "body", "color", "data", "user_id"}
    for body in (
        {"title": "kept", "stars": "x"},
        {"title": "kept", "mood": 1},
        {"stars": 4, "mood": 1},  # a valid field beside an undeclared one
        {"body": "new", "data": {"big": 2**70}},  # ... beside one the body cannot hold
        {"title": "y" * 60},
        {"title": "changed", "stars": 99},
        {"title": "changed", "color": "green", "body": "new"},
        {"title": "changed", "user_id": "not-a-uuid"},
        {"title": "changed", "data": {"big": 2**70}},
        {"title": "changed", "data": DEEP},
    ):
        response = getattr(api, method)(f"/api/notes/{note.id}/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        after = Entity.objects.get(id=note.id)
        assert after.properties == before.properties, body
        assert "mood" not in after
        assert (after.added_id, bytes(after.row_body)) == (
            before.added_id,
            bytes(before.row_body),
        ), body


def test_anonymous_and_unprivileged_clients_cannot_write_or_read():
    note = Note.objects.create(title="private")
    anonymous = APIClient()
    reader = client_with("view_note")
    others = client_with("view_tag", "add_tag", "change_tag", "delete_tag")
    for client, read in ((anonymous, False), (reader, True), (others, False)):
        assert (client.get("/api/notes/").status_code == 200) is read
        assert client.post("/api/notes/", {"title": "new"}, format="json").status_code in (401, 403)
        patch = client.patch(f"/api/notes/{note.id}/", {"title": "hacked"}, format="json")
        assert patch.status_code in (401, 403)
        assert client.delete(f"/api/notes/{note.id}/").status_code in (401, 403)
    assert [n.title for n in Note.objects.all()] == ["private"]


def test_an_allow_kind_ignores_undeclared_fields_in_a_body():
    client = client_with("add_tag", "view_tag")
    user = uuid.uuid4()
    response = client.post("/api/tags/", {"name": "t", "user_id": str(user), "x": 1}, format="json")
    assert response.status_code == 201
    assert "x" not in Tag.objects.get(id=response.json()["id"])


def test_a_body_over_djangos_upload_limit_is_a_400(api):
    huge = {"title": "x", "body": "y" * 3_000_000}  # DATA_UPLOAD_MAX_MEMORY_SIZE is 2.5 MB
    response = api.post("/api/notes/", huge, format="json")
    assert response.status_code == 400
    assert Entity.objects.all().count() == 0
    big = {"title": "x", "data": {"nested": [[[[[[[[[[[[1]]]]]]]]]]]] * 10}}
    assert api.post("/api/notes/", big, format="json").status_code == 201

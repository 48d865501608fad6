"""``KindAdmin`` (docs/kinds.md#the-admin): the list of a kind's fields, search through its
indexes, Django's add and change pages with validation and the conditional-save token,
history, delete, and the link back to the raw entity view."""

from __future__ import annotations

import re
import uuid

from django.contrib.admin.models import LogEntry
from django.test import Client

from schemaless_store.admin.entity_form import CHANGED_MEANWHILE
from schemaless_store.kinds.admin import KindAdmin
from schemaless_store.models import Entity
from tests.kindsapp.models import Note, Tag
from tests.support import STORE

pytestmark = STORE

LIST = "/admin/kindsapp/note/"


def page_of(note: Note, view: str = "change") -> str:
    return f"{LIST}{note.id}/{view}/"


def form_data(client: Client, url: str, **changes: str) -> dict[str, str]:
    """The change page's form as it was loaded, with ``changes``."""
    html = client.get(url).content.decode()
    data = {}
    for name in (
        "title",
        "body",
        "link",
        "contact",
        "stars",
        "score",
        "posted",
        "day",
        "user_id",
        "data",
        "color",
        "loaded",
    ):
        match = re.search(rf'name="{name}"[^>]*value="([^"]*)"', html)
        data[name] = match.group(1) if match else ""
    data["color"] = data["color"] or "red"
    data["data"] = data["data"] or "{}"
    data["stars"] = data["stars"] or "3"
    data.update(changes)
    return data


def test_the_list_shows_only_the_kind_with_its_fields(admin_client):
    user = uuid.uuid4()
    note = Note.objects.create(title="listed", user_id=user)
    Tag.objects.create(name="not-a-note", user_id=user)
    response = admin_client.get(LIST)
    assert response.status_code == 200
    text = response.content.decode()
    assert "listed" in text and "not-a-note" not in text
    assert "Title" in text and page_of(note) in text
    found = admin_client.get(LIST, {"q": f"user_id={user}"}).content.decode()
    assert "listed" in found
    assert (
        "not-a-note"
        not in admin_client.get("/admin/kindsapp/tag/", {"q": "name=x"}).content.decode()
    )
    assert "serves" in admin_client.get(LIST, {"q": "body=x"}).content.decode()  # no index
    assert "listed" in admin_client.get(LIST, {"q": str(note.id)}).content.decode()


def test_add_validates_and_writes_through_the_store(admin_client):
    response = admin_client.post(
        f"{LIST}add/", {"title": "", "stars": "9", "color": "red", "data": "{}"}
    )
    assert response.status_code == 200
    assert Entity.objects.all().count() == 0
    assert "This field is required" in response.content.decode()
    response = admin_client.post(
        f"{LIST}add/", {"title": "added", "stars": "4", "color": "red", "data": "{}"}
    )
    assert response.status_code == 302
    (note,) = Note.objects.all()
    assert note.title == "added" and note.stars == 4
    entry = LogEntry.objects.get()
    assert entry.object_id == str(note.id)


def test_change_with_the_token_and_a_conflict(admin_client):
    note = Note.objects.create(title="before", stars=2)
    page = admin_client.get(page_of(note)).content.decode()
    assert f"/admin/schemaless_store/entity/{note.id}/change/" in page  # the raw view
    data = form_data(admin_client, page_of(note), title="after")
    assert data["loaded"]
    # Someone else writes meanwhile: the page's token no longer matches.
    other = Note.objects.get(id=note.id)
    other.stars = 5
    other.save()
    response = admin_client.post(page_of(note), data)
    assert response.status_code == 200 and "changed by someone else" in response.content.decode()
    assert Note.objects.get(id=note.id).title == "before"
    data = form_data(admin_client, page_of(note), title="after")
    assert admin_client.post(page_of(note), data).status_code == 302
    assert Note.objects.get(id=note.id).title == "after"
    assert Note.objects.get(id=note.id).stars == 5
    history = admin_client.get(page_of(note, "history"))
    assert history.status_code == 200 and "Changed" in history.content.decode()


def test_a_conflict_at_write_time_shows_the_form_again_and_writes_nothing(
    admin_client, monkeypatch
):
    """Someone writes after the form's own check of its token, before the write: the write
    refuses (``Conflict``), and the user gets the change form back, their edit in it, with an
    error saying the entity changed meanwhile, as Django shows any failed validation."""
    note = Note.objects.create(title="before", stars=2)
    data = form_data(admin_client, page_of(note), title="after")
    save_model = KindAdmin.save_model

    def raced(self, request, obj, form, change):
        other = Note.objects.get(id=note.id)
        other.stars = 5
        other.save()
        save_model(self, request, obj, form, change)

    monkeypatch.setattr(KindAdmin, "save_model", raced)
    response = admin_client.post(page_of(note), data)
    assert response.status_code == 200
    assert response.templates[0].name == "admin/schemaless_store/kind/change_form.html"
    form = response.context["adminform"].form
    assert form.non_field_errors() == [CHANGED_MEANWHILE]
    assert form["title"].value() == "after"  # what the user typed is still in the form
    assert CHANGED_MEANWHILE.split(".")[0] in response.content.decode()
    stored = Note.objects.get(id=note.id)
    assert (stored.title, stored.stars) == ("before", 5)  # theirs kept, nothing of ours
    assert not LogEntry.objects.exists()


def test_a_taken_unique_value_is_a_field_error(admin_client):
    Note.objects.create(title="taken")
    response = admin_client.post(
        f"{LIST}add/", {"title": "taken", "stars": "3", "color": "red", "data": "{}"}
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["title"] == [
        "Note with this Title already exists."
    ]
    assert Note.objects.all().count() == 1 and not LogEntry.objects.exists()


def test_a_stored_value_that_does_not_fit_is_shown_not_crashed(admin_client):
    raw = Entity.objects.create(kind="note", title="old", stars="many")
    response = admin_client.get(f"{LIST}{raw.id}/change/", follow=True)
    assert response.status_code == 200
    assert "does not fit" in response.content.decode()


def test_delete_and_another_kinds_id(admin_client):
    note = Note.objects.create(title="doomed")
    tag = Tag.objects.create(name="t", user_id=uuid.uuid4())
    assert admin_client.get(f"{LIST}{tag.id}/change/").status_code == 302  # not a note
    assert admin_client.post(page_of(note, "delete"), {"post": "yes"}).status_code == 302
    assert Entity.objects.get_many([note.id]) == {}
    assert Entity.objects.get_many([tag.id])


def test_permissions_are_per_kind(client):
    from tests.support.admin import client_for

    Note.objects.create(title="secret")
    assert client.get(LIST).status_code == 302  # to the login page
    viewer = client_for("view_tag")
    assert viewer.get(LIST).status_code == 403
    assert viewer.get("/admin/kindsapp/tag/").status_code == 200
    reader = client_for("view_note")
    assert reader.get(LIST).status_code == 200
    assert (
        reader.post(
            f"{LIST}add/", {"title": "x", "stars": "3", "color": "red", "data": "{}"}
        ).status_code
        == 403
    )
    assert Note.objects.all().count() == 1

"""Kinds (docs/kinds.md): typed models whose instances are entities. ``Note`` refuses undeclared
properties, ``Tag`` keeps them; both have an index on ``user_id``, pinned to the kind."""

from __future__ import annotations

import datetime as dt
import inspect
import uuid
from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import models
from django.test import override_settings

from schemaless_store import DELETE, Index
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import (
    ConfigurationError,
    Conflict,
    InvalidEntityError,
    InvalidQuery,
    NoIndexForQuery,
    UniqueViolation,
)
from schemaless_store.kinds import Kind
from schemaless_store.kinds.kind import KINDS
from schemaless_store.mapping import map_entities
from schemaless_store.models import Entity
from schemaless_store.values import expected
from tests.kindsapp.models import Note, Tag
from tests.support import STORE

pytestmark = STORE


def stored(entity_id: uuid.UUID) -> dict | None:
    """The stored properties, read as a plain entity (no kind in the way)."""
    found = Entity.objects.get_many([entity_id]).get(entity_id)
    return None if found is None else found.properties


def test_a_kind_is_an_entity_with_its_name_stored():
    note = Note.objects.create(title="hello", stars=4)
    assert isinstance(note, Entity)
    body = stored(note.id)
    assert body["kind"] == "note"
    assert body["title"] == "hello" and body["stars"] == 4
    # Fields not given are stored with their defaults, as Django's Model() sets them.
    assert body["color"] == "red" and body["public"] is False and body["data"] == {}
    got = Note.objects.get(id=note.id)
    assert type(got) is Note
    assert (got.title, got.stars, got["title"]) == ("hello", 4, "hello")
    assert repr(got) == f"<Note {note.id}>"
    assert got.pk == note.id


def test_values_are_cleaned_and_stored_with_their_types():
    user = uuid.uuid4()
    when = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC)
    note = Note.objects.create(
        title=12345, user_id=str(user), stars="5", score="2.5", posted=when, day="2024-05-01"
    )
    body = stored(note.id)
    assert body["title"] == "12345" and body["user_id"] == user and body["stars"] == 5
    assert body["score"] == 2.5 and body["posted"] == when
    assert body["day"] == "2024-05-01"  # a date is stored as text, read back as a date
    assert Note.objects.get(id=note.id).day == dt.date(2024, 5, 1)


@pytest.mark.parametrize(
    ("properties", "field"),
    [
        ({"title": ""}, "title"),
        ({"title": "x" * 51}, "title"),
        ({"title": "ok", "stars": 9}, "stars"),
        ({"title": "ok", "stars": "many"}, "stars"),
        ({"title": "ok", "link": "not a link"}, "link"),
        ({"title": "ok", "contact": "nobody"}, "contact"),
        ({"title": "ok", "color": "green"}, "color"),
        ({"title": "ok", "user_id": "not-a-uuid"}, "user_id"),
        ({"title": "ok", "mood": "sunny"}, "__all__"),  # Note is extra = "forbid"
    ],
)
def test_an_invalid_instance_is_refused_and_nothing_is_written(properties, field):
    note = Note(**properties)
    with pytest.raises(ValidationError) as raised:
        note.save()
    assert field in raised.value.message_dict
    if field == "__all__":
        assert "mood" in str(raised.value)
    assert stored(note.id) is None
    with pytest.raises(ValidationError):
        Note.objects.create(**properties)
    assert Entity.objects.all().count() == 0


def test_an_allow_kind_keeps_undeclared_properties():
    user = uuid.uuid4()
    tag = Tag.objects.create(name="red", user_id=user, shade=3)
    assert Tag.objects.get(id=tag.id)["shade"] == 3
    assert stored(tag.id)["kind"] == "tag"


def test_the_kind_property_cannot_be_another_kind():
    with pytest.raises(InvalidEntityError, match="kind 'note'"):
        Note(title="x", kind="tag")
    note = Note.objects.create(title="x")
    note["kind"] = "tag"  # put back by save: an instance of Note stays a note
    note.save()
    assert stored(note.id)["kind"] == "note"


def test_the_manager_sees_only_its_kind():
    user = uuid.uuid4()
    note = Note.objects.create(title="n", user_id=user)
    tag = Tag.objects.create(name="t", user_id=user)
    plain = Entity.objects.create(user_id=user, title="plain")
    with pytest.raises(Note.DoesNotExist):
        Note.objects.get(id=tag.id)
    with pytest.raises(Note.DoesNotExist):
        Note.objects.get(id=plain.id)
    assert issubclass(Note.DoesNotExist, Entity.DoesNotExist)
    assert set(Note.objects.get_many([note.id, tag.id, plain.id])) == {note.id}
    assert [e.id for e in Note.objects.all()] == [note.id]
    assert Note.objects.all().count() == 1 and Entity.objects.all().count() == 3
    assert [e.id for e in Tag.objects.all()[:5]] == [tag.id]
    assert Note.objects.all().page(size=5).entities[0].id == note.id
    assert Note.objects.get(title="n").id == note.id  # through the unique title index


def test_indexes_are_pinned_to_their_kind():
    user = uuid.uuid4()
    notes = [Note.objects.create(title=f"n{i}", user_id=user) for i in range(3)]
    tags = [Tag.objects.create(name=f"t{i}", user_id=user) for i in range(2)]
    assert {e.id for e in Note.objects.filter_index(user_id=user)} == {n.id for n in notes}
    assert {e.id for e in Tag.objects.filter_index(user_id=user)} == {t.id for t in tags}
    # The rows themselves are apart: index_note_user has none for a tag.
    assert set(Note.objects.filter_index(user_id=user).ids()) == {n.id for n in notes}
    # An entity written without the kind class, but with the kind's name, is of the kind.
    raw = Entity.objects.create(kind="tag", name="raw", user_id=user)
    assert raw.id in {e.id for e in Tag.objects.filter_index(user_id=user)}
    # A plain query never uses a kind's index, and a kind's query never a plain one.
    assert registry.get("index_note_user").kind == "note"
    with pytest.raises(NoIndexForQuery):
        list(Entity.objects.filter_index(title="n1"))
    with pytest.raises(InvalidQuery, match="pins the kind"):
        Note.objects.filter_index(kind="note", user_id=user)
    plan = Note.objects.filter_index(user_id=user).explain()
    assert "index_note_user (user_id; shard_on user_id; kind note)" in plan
    # Entity.objects with kind="note" (the operators' admin search, older code) uses them too.
    plain = Entity.objects.filter_index(kind="note", user_id=user)
    assert {e.id for e in plain} == {n.id for n in notes} and plain.index.name == "index_note_user"
    refused = Entity.objects.filter_index(body="x").explain()
    assert "index_note_user" not in refused
    refused = Entity.objects.filter_index(user_id__gt=user).explain()
    assert "is declared on kind 'note'" in refused
    with pytest.raises(NoIndexForQuery, match=r"in the Meta\.indexes of kind 'note'"):
        list(Note.objects.filter_index(body="x"))


def test_a_unique_index_on_a_kind_refuses_a_second_value():
    Note.objects.create(title="only")
    with pytest.raises(UniqueViolation):
        Note.objects.create(title="only")
    Tag.objects.create(name="only", user_id=uuid.uuid4(), title="only")  # another kind: fine
    assert Note.objects.filter_index(title="only").count() == 1


def test_a_stored_value_that_no_longer_fits_reads_without_crashing():
    # As if written before the fields were what they are: a wrong type, a field missing.
    raw = Entity.objects.create(kind="note", title="old", stars="many", posted="yesterday")
    raw.pop("color", None)
    note = Note.objects.get(id=raw.id)
    assert note.stars == "many" and note.posted == "yesterday"
    assert note.color == "red"  # a field added with a default reads back with the default
    errors = note.kind_errors()
    assert set(errors) == {"stars", "posted"}
    with pytest.raises(ValidationError):
        note.save()
    assert stored(raw.id)["stars"] == "many"


def test_modify_and_if_unchanged_validate_each_write():
    note = Note.objects.create(title="m", stars=1)

    def bump(entity):
        entity.stars += 1

    Note.objects.modify(note.id, bump)
    assert stored(note.id)["stars"] == 2

    def too_many(entity):
        entity.stars = 99

    with pytest.raises(ValidationError):
        Note.objects.modify(note.id, too_many)
    assert stored(note.id)["stars"] == 2
    tag = Tag.objects.create(name="t", user_id=uuid.uuid4())
    with pytest.raises(Note.DoesNotExist):
        Note.objects.modify(tag.id, bump)
    first, second = Note.objects.get(id=note.id), Note.objects.get(id=note.id)
    first.title = "first"
    first.save(if_unchanged=True)
    second.title = "second"
    with pytest.raises(Conflict):
        second.save(if_unchanged=True)
    assert stored(note.id)["title"] == "first"


def test_bulk_put_validates_every_item_before_writing():
    user = uuid.uuid4()
    with pytest.raises(ValidationError):
        Note.objects.bulk_put([{"title": "a", "user_id": user}, {"title": "b", "stars": 0}])
    assert Entity.objects.all().count() == 0
    put = Note.objects.bulk_put([{"title": "a", "user_id": user}, {"title": "b"}])
    assert all(type(p) is Note for p in put)
    assert {e.title for e in Note.objects.all()} == {"a", "b"}


@override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})
def test_history_is_kept_for_a_kind():
    note = Note.objects.create(title="v1")
    note.title = "v2"
    note.save()
    note.delete()
    versions = note.history()
    assert [v.properties and v.properties["title"] for v in versions] == ["v1", "v2", None]


def test_mapentities_with_a_kind_changes_only_that_kind(fresh_runs):
    user = uuid.uuid4()
    note = Note.objects.create(title="n", user_id=user)
    tag = Tag.objects.create(name="t", user_id=user, title="keep")
    summary = map_entities(rename_title, kind="note")
    assert summary.ok and summary.changed == 1
    assert stored(note.id)["title"] == "N" and stored(tag.id)["title"] == "keep"
    summary = map_entities(rename_title, kind="tag", where={"user_id": user})
    assert summary.changed == 1 and stored(tag.id)["title"] == "KEEP"
    with pytest.raises(ConfigurationError, match="no kind"):
        map_entities(rename_title, kind="nothing")


def rename_title(entity):
    entity["title"] = entity["title"].upper()


def test_mapentities_can_delete_entities_of_a_kind(fresh_runs):
    note = Note.objects.create(title="gone")
    Tag.objects.create(name="t", user_id=uuid.uuid4())
    map_entities(delete_all, kind="note")
    assert stored(note.id) is None and Tag.objects.all().count() == 1


def delete_all(entity):
    return DELETE


@pytest.mark.asyncio
async def test_the_async_api_of_a_kind():
    note = await Note.objects.acreate(title="async")
    got = await Note.objects.aget(id=note.id)
    got.stars = 5
    await got.asave()
    with pytest.raises(ValidationError):
        await Note.objects.acreate(title="")
    assert [n.id async for n in Note.objects.filter_index(title="async")] == [note.id]
    again = await Note.objects.aget(id=note.id)
    assert again.stars == 5


@pytest.mark.asyncio
async def test_asave_takes_and_honours_every_keyword_of_save():
    note = await Note.objects.acreate(title="kw", stars=2)
    loaded = expected.token(bytes(note.row_body), note.added_id)
    note.stars = 99  # invalid: only validate=False lets it through, as with save()
    await note.asave(validate=False)
    assert (await sync_to_async(stored)(note.id))["stars"] == 99
    other = await Note.objects.aget(id=note.id)
    other.stars = 4
    with pytest.raises(Conflict):  # the stored state is no longer the one the token names
        await other.asave(expect=expected.Expected(exists=True, token=loaded))
    assert (await sync_to_async(stored)(note.id))["stars"] == 99
    other.title = "only this"
    await other.asave(update_fields=["title"], if_unchanged=True)
    assert (await sync_to_async(stored)(note.id))["stars"] == 99
    with pytest.raises(TypeError):
        await other.asave(nonsense=True)  # save()'s own refusal
    keywords = [
        name
        for name, parameter in inspect.signature(Note.save).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert {"validate", "expect", "if_unchanged", "update_fields"} <= set(keywords)
    given = {name: inspect.signature(Note.save).parameters[name].default for name in keywords}
    seen: list[dict] = []
    with mock.patch.object(Note, "save", lambda self, **kw: seen.append(kw)):
        await other.asave(**given)
    assert seen == [given]


def test_bad_declarations_are_refused_clearly():
    with pytest.raises(ConfigurationError, match="relation"):

        class Bad(Kind):
            owner = models.ForeignKey("auth.User", on_delete=models.CASCADE)

            class Meta:
                app_label = "kindsapp"

    with pytest.raises(ConfigurationError, match="extra"):

        class Bad2(Kind):
            class Meta:
                app_label = "kindsapp"
                extra = "sometimes"

    with pytest.raises(ConfigurationError, match="taken"):

        class Bad3(Kind):
            class Meta:
                app_label = "kindsapp"
                kind_name = "note"

    with pytest.raises(ConfigurationError, match="Index"):

        class Bad4(Kind):
            class Meta:
                app_label = "kindsapp"
                indexes = [models.Index(fields=["x"], name="x")]

    assert not any(isinstance(i, Index) and i.name == "x" for i in registry.all())


def test_unique_on_a_field_is_refused_with_the_index_to_declare():
    """A kind cannot enforce ``unique=True``: refused at class creation, naming the unique
    index that does it, never silently ignored (docs/kinds.md, "What a kind cannot do")."""
    with pytest.raises(ConfigurationError, match="unique=") as raised:

        class Account(Kind):
            email = models.EmailField(unique=True)

            class Meta:
                app_label = "kindsapp"

    message = str(raised.value)
    assert "Account" in message and "email" in message
    assert "Index('index_account_email', ['email'], shard_on='email', unique=True)" in message
    assert "Meta.indexes" in message and "UniqueViolation" in message
    with pytest.raises(ConfigurationError, match="unique_for_date"):

        class Daily(Kind):
            title = models.CharField(max_length=10, unique_for_date="day")
            day = models.DateField()

            class Meta:
                app_label = "kindsapp"

    with pytest.raises(ConfigurationError, match=r"unique_together[\s\S]*'a', 'b'"):

        class Pair(Kind):
            a = models.CharField(max_length=10)
            b = models.CharField(max_length=10)

            class Meta:
                app_label = "kindsapp"
                unique_together = [("a", "b")]

    with pytest.raises(ConfigurationError, match="primary_key"):

        class Keyed(Kind):
            code = models.CharField(max_length=10, primary_key=True)

            class Meta:
                app_label = "kindsapp"

    assert not {"account", "daily", "pair", "keyed"} & set(KINDS)

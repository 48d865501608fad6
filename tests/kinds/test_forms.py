"""Django's ``ModelForm`` over a kind (docs/kinds.md#forms): its fields and validation come from
the kind's fields, and ``form.save()`` writes through the store."""

from __future__ import annotations

import pytest
from django import forms

from schemaless_store.exceptions import UniqueViolation
from schemaless_store.models import Entity
from tests.kindsapp.models import Note
from tests.support import STORE

pytestmark = STORE


class NoteForm(forms.ModelForm):
    class Meta:
        model = Note
        fields = ["title", "stars", "link", "color", "posted"]


class EveryFieldForm(forms.ModelForm):
    class Meta:
        model = Note
        fields = "__all__"  # noqa: DJ007 (what it lists is the point)


def test_the_form_fields_come_from_the_kind():
    form = NoteForm()
    assert list(form.fields) == ["title", "stars", "link", "color", "posted"]
    assert isinstance(form.fields["color"], forms.TypedChoiceField)
    assert form.fields["title"].max_length == 50
    assert form.fields["title"].required and not form.fields["posted"].required
    # "__all__" is the declared fields: the row's own columns are never a form's.
    assert list(EveryFieldForm().fields) == [f.name for f in Note._kind.fields.values()]


def test_a_valid_form_saves_through_the_store():
    form = NoteForm(
        data={"title": "hi", "stars": "4", "link": "https://example.com/", "color": "blue"}
    )
    assert form.is_valid(), form.errors
    note = form.save()
    stored = Entity.objects.get(id=note.id)
    assert stored["kind"] == "note" and stored["stars"] == 4 and stored["color"] == "blue"
    edit = NoteForm(instance=Note.objects.get(id=note.id))
    assert edit.initial["title"] == "hi" and edit.initial["stars"] == 4
    edit = NoteForm(
        instance=Note.objects.get(id=note.id),
        data={"title": "changed", "stars": "2", "color": "red"},
    )
    assert edit.is_valid(), edit.errors
    edit.save()
    assert Note.objects.get(id=note.id).title == "changed"
    assert Entity.objects.all().count() == 1


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"title": "", "stars": "3", "color": "red"}, "title"),
        ({"title": "x", "stars": "40", "color": "red"}, "stars"),
        ({"title": "x", "stars": "3", "color": "green"}, "color"),
        ({"title": "x", "stars": "3", "color": "red", "link": "nope"}, "link"),
        ({"title": "x", "stars": "3", "color": "red", "posted": "not a time"}, "posted"),
    ],
)
def test_an_invalid_form_names_the_field_and_writes_nothing(data, field):
    form = NoteForm(data=data)
    assert not form.is_valid()
    assert field in form.errors
    with pytest.raises(ValueError):
        form.save()
    assert Entity.objects.all().count() == 0


def test_a_taken_unique_value_is_an_error_on_the_field_its_index_guards():
    """``is_valid()`` reads the unique index (issue 44: a valid form saves); a value taken
    after it, by a racing writer, is still refused by the write, and ``unique_error`` puts
    that refusal on the same field."""
    holder = Note.objects.create(title="taken")
    form = NoteForm(data={"title": "taken", "stars": "3", "color": "red"})
    assert not form.is_valid()
    assert form.errors == {"title": ["Note with this Title already exists."]}
    assert str(holder.id) not in str(form.errors)
    raced = NoteForm(data={"title": "free", "stars": "3", "color": "red"})
    assert raced.is_valid()
    Note.objects.create(title="free")  # taken between is_valid() and save()
    with pytest.raises(UniqueViolation) as refused:
        raced.save()
    raced.add_error(None, Note.unique_error(refused.value))
    assert raced.errors == {"title": ["Note with this Title already exists."]}
    assert Entity.objects.all().count() == 2


@pytest.mark.parametrize(
    "index",
    [
        "index_users_username",  # another app's (indexes are global): no field of a Note
        "index_gone",  # no longer declared
    ],
)
def test_a_unique_violation_of_no_field_is_a_non_field_error(index):
    error = Note.unique_error(UniqueViolation("username 'x' is taken", index=index))
    assert not hasattr(error, "error_dict")
    assert error.messages == ["username 'x' is taken"]

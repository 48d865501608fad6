"""A kind's queryset writes (issue 44 item 1): ``delete()`` and ``update()`` of a filtered
set (``F()`` applied), ``get_or_create`` and ``update_or_create`` race-free on a unique index."""

from __future__ import annotations

from unittest import mock

import pytest
from django.core.exceptions import ValidationError
from django.db.models import F, Value

from schemaless_store.exceptions import InvalidQuery
from schemaless_store.kinds.query import KindQuery
from schemaless_store.models import Entity
from tests.kindsapp.models import Author, Book
from tests.support import STORE

pytestmark = STORE


@pytest.fixture
def shelf():
    return [
        Book.objects.create(title=title, genre=genre, stars=stars)
        for title, genre, stars in [("A", "sf", 1), ("B", "sf", 2), ("C", "crime", 3)]
    ]


def test_delete_of_a_filtered_set_deletes_only_the_matches(shelf):
    assert Book.objects.filter(genre="sf").delete() == (2, {"kindsapp.Book": 2})
    assert [b.title for b in Book.objects.all()] == ["C"]
    assert set(Entity.objects.get_many([b.id for b in shelf])) == {shelf[2].id}
    with pytest.raises(InvalidQuery, match="sliced"):
        Book.objects.all()[:1].delete()


def test_update_applies_values_and_f_expressions_validated(shelf):
    assert Book.objects.filter(genre="sf").update(stars=F("stars") + 10) == 2
    assert {b.title: b.stars for b in Book.objects.all()} == {"A": 11, "B": 12, "C": 3}
    assert Book.objects.filter(genre="crime").update(genre=Value("noir")) == 1
    assert Book.objects.get(title="C").genre == "noir"
    with pytest.raises(ValidationError):
        Book.objects.filter(genre="sf").update(stars="many")
    with pytest.raises(InvalidQuery, match=r"Book\.stars: .* a kind cannot apply"):
        Book.objects.filter(genre="sf").update(stars=F("stars") % 2)
    assert {b.title: b.stars for b in Book.objects.all()} == {"A": 11, "B": 12, "C": 3}


def test_get_or_create_and_update_or_create_on_a_unique_index():
    ada, created = Author.objects.get_or_create(name="Ada")
    assert created and Author.objects.get_or_create(name="Ada") == (ada, False)
    book, created = Book.objects.update_or_create(title="X", defaults={"stars": 4})
    assert created and book.stars == 4
    again, created = Book.objects.update_or_create(title="X", defaults={"stars": 5})
    assert not created and again.id == book.id and Book.objects.get(pk=book.pk).stars == 5
    made, created = Book.objects.update_or_create(
        title="Y", defaults={"stars": 1}, create_defaults={"stars": 2}
    )
    assert created and made.stars == 2
    by_id, created = Book.objects.get_or_create(pk=book.pk, defaults={"title": "other"})
    assert not created and by_id.id == book.id
    with pytest.raises(InvalidQuery, match=r"unique index over exactly \['genre'\]"):
        Book.objects.get_or_create(genre="sf")


def test_get_or_create_is_race_free():
    """Another writer creates the author between this call's read and its write: the unique
    index refuses the second write, and the call answers the winner's entity."""
    winner = {}
    real_get = KindQuery.get

    def racing_get(query, *args, **kwargs):
        if not winner:
            winner["author"] = Author.objects.create(name="Ada")
            raise Author.DoesNotExist("not yet")
        return real_get(query, *args, **kwargs)

    with mock.patch.object(KindQuery, "get", racing_get):
        found, created = Author.objects.get_or_create(name="Ada")
    assert not created and found.id == winner["author"].id
    assert Author.objects.filter(name="Ada").count() == 1

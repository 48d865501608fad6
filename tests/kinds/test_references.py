"""References between kinds (issue 44 item 3, docs/kinds.md#references): the id stored and
its kind validated, the instance read on first use, prefetched for a page in one get_many,
an index on a reference, a ModelForm over one, and the rule on delete (left dangling)."""

from __future__ import annotations

import pytest
from django import forms
from django.core.exceptions import ValidationError
from django.db import models

from schemaless_store.exceptions import ConfigurationError, InvalidQuery
from schemaless_store.kinds import Kind, ReferenceField
from schemaless_store.models import Entity
from schemaless_store.query import fetch
from tests.kindsapp.models import Author, Book, Note, Review
from tests.support import STORE

pytestmark = STORE


def test_a_reference_stores_the_id_and_reads_the_instance_once(monkeypatch):
    ada = Author.objects.create(name="Ada")
    book = Book.objects.create(title="t", author=ada)
    assert Entity.objects.get(id=book.id)["author"] == ada.id  # the id, in the body
    assert book.author is ada and book.author_id == ada.id
    fresh = Book.objects.get(pk=book.pk)
    calls = []
    real = fetch.get_many
    monkeypatch.setattr(
        "schemaless_store.kinds.manager.get_many", lambda *a: calls.append(a) or real(*a)
    )
    assert fresh.author.name == "Ada" and fresh.author.name == "Ada"
    assert len(calls) == 1  # read on first use, then kept
    fresh.author = None
    fresh.save()
    assert Book.objects.get(pk=book.pk).author is None
    fresh.author_id = str(ada.id)
    fresh.save()
    assert Book.objects.get(pk=book.pk).author == ada


def test_the_referenced_kind_is_validated():
    note = Note.objects.create(title="n")
    with pytest.raises(ValidationError, match="There is no Author with id"):
        Book.objects.create(title="t", author=note.id)  # an id of another kind
    with pytest.raises(ValidationError, match="author refers to a Author, not a Note"):
        Book.objects.create(title="t", author=note)
    with pytest.raises(ValidationError, match="is not a valid UUID"):
        Book.objects.create(title="t", author="nope")
    assert Book.objects.count() == 0


def test_an_index_on_a_reference_and_filter_by_instance_or_id():
    ada, bob = Author.objects.create(name="Ada"), Author.objects.create(name="Bob")
    for title, who in [("a", ada), ("b", bob), ("c", ada)]:
        Book.objects.create(title=title, author=who)
    assert [b.title for b in Book.objects.filter(author=ada)] == ["a", "c"]
    assert [b.title for b in Book.objects.filter(author=str(bob.id))] == ["b"]
    assert {b.title for b in Book.objects.filter(author__in=[bob, ada.id])} == {"a", "b", "c"}


def test_prefetch_reads_a_pages_references_in_one_get_many(monkeypatch):
    authors = [Author.objects.create(name=f"a{n}") for n in range(3)]
    for n in range(6):
        Book.objects.create(title=f"b{n}", author=authors[n % 3])
    Book.objects.create(title="none")
    calls = []
    real = fetch.get_many
    monkeypatch.setattr(
        "schemaless_store.kinds.manager.get_many", lambda *a: calls.append(a) or real(*a)
    )
    page = list(Book.objects.select_related("author")[:7])
    assert len(calls) == 1 and len(set(calls[0][1])) == 3
    assert [b.author.name if b.author else None for b in page] == [
        "a0",
        "a1",
        "a2",
        "a0",
        "a1",
        "a2",
        None,
    ]
    assert len(calls) == 1  # nothing read per instance
    paged = Book.objects.order_by("title").prefetch_related("author").page(size=3)
    assert [b.author.name for b in paged] == ["a0", "a1", "a2"] and len(calls) == 2
    with pytest.raises(InvalidQuery, match="'title' is not a ReferenceField of the kind"):
        Book.objects.select_related("title")


def test_deleting_the_referenced_entity_leaves_the_reference_dangling():
    ada = Author.objects.create(name="Ada")
    book = Book.objects.create(title="t", author=ada)
    review = Review.objects.create(book=book, stars=5)
    book.delete()
    fresh = Review.objects.get(pk=review.pk)
    assert fresh.book is None and fresh.book_id == book.id
    assert list(Review.objects.filter(book=book.id)) == [fresh]
    with pytest.raises(ConfigurationError, match="on_delete=DANGLE"):
        ReferenceField(Book, on_delete=models.CASCADE)


def test_a_modelform_edits_a_reference_by_id():
    ada, bob = Author.objects.create(name="Ada"), Author.objects.create(name="Bob")

    class BookForm(forms.ModelForm):
        class Meta:
            model = Book
            fields = ["title", "author"]

    form = BookForm({"title": "t", "author": str(ada.id)})
    assert form.is_valid(), form.errors
    book = form.save()
    assert Book.objects.get(pk=book.pk).author == ada
    edit = BookForm(instance=book)
    assert edit.initial["author"] == ada.id
    edit = BookForm({"title": "t", "author": str(Note.objects.create(title="n").id)}, instance=book)
    assert not edit.is_valid() and "There is no Author" in str(edit.errors["author"])
    edit = BookForm({"title": "t", "author": str(bob.id)}, instance=book)
    assert edit.is_valid() and edit.save().author == bob


def test_a_reference_to_what_is_not_a_kind_is_refused():
    class Loose(Kind):
        other = ReferenceField("kindsapp.Nothing", null=True, blank=True)

        class Meta:
            app_label = "kindsapp"
            kind_name = "loose_ref_test"

    with pytest.raises(ConfigurationError, match=r"Loose: other refers to 'kindsapp\.Nothing'"):
        Loose(other=Author.objects.create(name="x").id).full_clean()

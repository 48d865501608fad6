"""Typed values on a kind (issue 44 item 2): dates, aware datetimes, decimals and UUIDs as
index values in their own order; auto_now and auto_now_add; F() refused by save();
update_fields as Django's; Meta.ordering used, or refused by a system check."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from unittest import mock

import pytest
from django.core.exceptions import ValidationError
from django.db.models import F
from django.utils import timezone

from schemaless_store.kinds.checks import ordering_problems
from schemaless_store.models import Entity
from tests.kindsapp.models import Book
from tests.support import STORE

pytestmark = STORE
D = decimal.Decimal


def test_dates_decimals_and_uuids_are_index_values_in_order():
    low, high = uuid.UUID(int=1), uuid.UUID(int=2**100)
    for title, day, price, isbn in [
        ("a", dt.date(1999, 12, 31), D("9.99"), high),
        ("b", dt.date(2002, 1, 1), D("10.50"), low),
        ("c", dt.date(2010, 6, 1), D("100"), None),
        ("d", dt.date(2002, 1, 2), D("-3"), uuid.UUID(int=5)),
    ]:
        Book.objects.create(title=title, published=day, price=price, isbn=isbn)
    since = Book.objects.filter(published__gte=dt.date(2002, 1, 1)).order_by("published")
    assert [b.title for b in since] == ["b", "d", "c"]
    assert [b.title for b in Book.objects.filter_index(published__lt=dt.date(2002, 1, 2))] == [
        "a",
        "b",
    ]
    # Decimals by number, not by text ("10.50" < "9.99" as text).
    assert [b.title for b in Book.objects.filter(price__gt=D("9")).order_by("price")] == [
        "a",
        "b",
        "c",
    ]
    assert [b.title for b in Book.objects.filter(price__lt=0)] == ["d"]
    assert Book.objects.get(price="10.5").title == "b"
    assert [b.title for b in Book.objects.filter(isbn__gt=low).order_by("isbn")] == ["d", "a"]
    assert Book.objects.get(isbn=str(high)).title == "a"


def test_aware_datetimes_order_and_naive_ones_are_made_aware():
    before = timezone.now()
    first = Book.objects.create(title="first")
    second = Book.objects.create(title="second")
    assert first.created.tzinfo is not None and before <= first.created <= second.created
    newest = Book.objects.filter(created__gte=before).order_by("-created")
    assert [b.title for b in newest] == ["second", "first"]
    naive = timezone.make_naive(before, timezone.get_default_timezone())
    assert Book.objects.filter(created__gte=naive).count() == 2


def test_auto_now_and_auto_now_add_are_set_by_save():
    book = Book.objects.create(title="t")
    created, updated = book.created, book.updated
    assert isinstance(created, dt.datetime) and isinstance(updated, dt.datetime)
    stored = Entity.objects.get(id=book.id)
    assert stored["created"] == created and stored["updated"] == updated
    book.stars = 4
    book.save()
    fresh = Book.objects.get(pk=book.pk)
    assert fresh.created == created and fresh.updated > updated


def test_save_refuses_an_f_expression_and_writes_nothing():
    book = Book.objects.create(title="t")
    book.title = F("title")
    with pytest.raises(ValidationError) as caught:
        book.save()
    assert "Book.title is F(title)" in str(caught.value) and "update(title=" in str(caught.value)
    assert Entity.objects.get(id=book.id)["title"] == "t"


def test_update_fields_as_djangos():
    book = Book.objects.create(title="t", stars=2)
    with pytest.raises(ValueError, match=r"do not exist in this model.*: nope"):
        book.save(update_fields=["nope"])
    # Only the named fields are validated and written: an invalid title, unsaved, is left.
    book.title = ""
    book.genre = "sf"
    book.save(update_fields=["genre"])
    stored = Entity.objects.get(id=book.id)
    assert stored["genre"] == "sf" and stored["title"] == "t"
    book.stars = "many"
    with pytest.raises(ValidationError, match="stars"):
        book.save(update_fields=["stars"])


def test_meta_ordering_orders_what_an_index_serves_in_it():
    for title in ["b", "c", "a"]:
        Book.objects.create(title=title, genre="g")
    assert [b.title for b in Book.objects.all()] == ["a", "b", "c"]
    assert [b.title for b in Book.objects.filter(genre="g")] == ["a", "b", "c"]
    # No index holds genre with stars in title order: the index's own order, not a refusal.
    assert Book.objects.filter(stars=3).count() == 3
    assert [b.title for b in Book.objects.order_by("-title")] == ["c", "b", "a"]


@pytest.mark.parametrize(
    ("ordering", "check_id"),
    [(["title", "stars"], "schemaless.E401"), (["?"], "schemaless.E401"), (["-body"], "E402")],
)
def test_a_meta_ordering_a_kind_cannot_use_is_refused_by_a_system_check(ordering, check_id):
    assert ordering_problems(Book) == []
    with mock.patch.object(Book._meta, "ordering", ordering):
        (problem,) = ordering_problems(Book)
    assert problem.id.endswith(check_id) and "kind Book" in problem.msg

"""A kind's queryset API over its indexes (issue 44 item 1, docs/kinds.md#querysets):
``filter``, ``exclude``, ``get``, ``count``, ``exists``, ``first``/``last``, ``order_by``,
slicing, ``in_bulk``, ``Q`` with ``&`` and ``|``, ``startswith``, ``using(shard)``, and the
refusals that name the kind and the index to declare."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import Q

from schemaless_store.exceptions import InvalidQuery, NoIndexForQuery
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.kindsapp.models import Author, Book, Note
from tests.support import STORE

pytestmark = STORE


@pytest.fixture
def books():
    """Five books: (Alpha sf 2001, Beta sf 2003, Gamma crime 2005, Delta sf 2007, Epsilon
    crime 2009), stars 1..5, and a plain entity and a note that must never show up."""
    Entity.objects.create(title="Alpha", genre="sf")
    Note.objects.create(title="Alpha")
    made = {}
    for n, (title, genre) in enumerate(
        [("Alpha", "sf"), ("Beta", "sf"), ("Gamma", "crime"), ("Delta", "sf"), ("Epsilon", "crime")]
    ):
        made[title] = Book.objects.create(
            title=title, genre=genre, stars=n + 1, published=dt.date(2001 + 2 * n, 1, 1)
        )
    return made


def titles(query):
    return [b.title for b in query]


def test_filter_exclude_and_order_by_read_the_kinds_indexes(books):
    assert titles(Book.objects.filter(genre="sf").order_by("title")) == ["Alpha", "Beta", "Delta"]
    assert titles(Book.objects.filter(genre="sf").order_by("-title")) == ["Delta", "Beta", "Alpha"]
    assert titles(Book.objects.filter(stars__gte=2, stars__lt=4).order_by("stars")) == [
        "Beta",
        "Gamma",
    ]
    assert titles(Book.objects.filter(genre="sf").exclude(title="Beta").order_by("title")) == [
        "Alpha",
        "Delta",
    ]
    assert titles(Book.objects.exclude(genre="sf")) == ["Epsilon", "Gamma"]
    assert titles(Book.objects.filter(genre="sf").filter(title="Delta")) == ["Delta"]
    beta = books["Beta"]
    assert titles(Book.objects.filter(genre="sf").exclude(pk=beta.pk)) == ["Alpha", "Delta"]
    assert titles(Book.objects.filter(Q(genre="sf") & ~Q(id__in=[beta.id]))) == ["Alpha", "Delta"]
    assert titles(Book.objects.filter(genre__in=["crime"]).order_by("title")) == [
        "Epsilon",
        "Gamma",
    ]
    assert titles(Book.objects.none()) == [] and Book.objects.none().count() == 0


def test_get_count_exists_first_last_slicing_and_in_bulk(books):
    alpha = books["Alpha"]
    assert Book.objects.get(pk=alpha.pk).title == "Alpha"
    assert Book.objects.get(id=str(alpha.id)).title == "Alpha"
    assert Book.objects.get(title="Gamma").id == books["Gamma"].id  # by the unique index
    with pytest.raises(Book.DoesNotExist, match="Book matching query does not exist"):
        Book.objects.get(title="Zeta")
    with pytest.raises(Book.MultipleObjectsReturned, match="more than one Book"):
        Book.objects.get(genre="sf")
    assert Book.objects.count() == 5 and Book.objects.filter(genre="sf").count() == 3
    assert Book.objects.exists() and not Book.objects.filter(genre="poetry").exists()
    # Meta.ordering = ["title"], served by index_book_title.
    assert Book.objects.first().title == "Alpha" and Book.objects.last().title == "Gamma"
    by_stars = Book.objects.order_by("-stars")
    assert by_stars.first().title == "Epsilon" and by_stars.last().title == "Alpha"
    assert Book.objects.earliest("stars").title == "Alpha"
    assert Book.objects.filter(genre="sf").latest("title").title == "Delta"
    assert [b.title for b in Book.objects.iterator()] == [
        "Alpha",
        "Beta",
        "Delta",
        "Epsilon",
        "Gamma",
    ]
    with pytest.raises(Book.DoesNotExist):
        Book.objects.filter(genre="poetry").latest("title")
    assert titles(by_stars[1:3]) == ["Delta", "Gamma"] and by_stars[4].title == "Alpha"
    assert by_stars[1:3].count() == 2 and len(by_stars[3:]) == 2
    with pytest.raises(IndexError):
        by_stars[5]
    with pytest.raises(InvalidQuery, match="Negative"):
        by_stars[-1]
    found = Book.objects.in_bulk([alpha.id, books["Beta"].id, Note.objects.first().id])
    assert set(found) == {alpha.id, books["Beta"].id}
    assert set(Book.objects.filter(genre="crime").in_bulk()) == {
        books["Gamma"].id,
        books["Epsilon"].id,
    }


def test_q_objects_and_or_merge_one_index_query_per_branch(books):
    either = Book.objects.filter(Q(genre="crime") | Q(title="Alpha"))
    assert titles(either) == ["Alpha", "Epsilon", "Gamma"]  # merged, in Meta.ordering
    assert either.count() == 3
    both = Book.objects.filter(Q(genre="sf") & Q(title__startswith="B"))
    assert titles(both) == ["Beta"]
    negated = Book.objects.filter(Q(genre="sf") & ~Q(title="Alpha")).order_by("title")
    assert titles(negated) == ["Beta", "Delta"]
    by_stars = Book.objects.filter(Q(stars=5) | Q(stars=1) | Q(stars=3)).order_by("-stars")
    assert titles(by_stars) == ["Epsilon", "Gamma", "Alpha"] and by_stars[1].title == "Gamma"
    assert titles(Book.objects.filter(Q(pk=books["Beta"].pk) | Q(genre="crime"))) == [
        "Beta",
        "Epsilon",
        "Gamma",
    ]


def test_startswith_is_a_range_on_the_index(books):
    Book.objects.create(title="Alphabet", genre="x")
    Book.objects.create(title="Alpi", genre="x")
    assert titles(Book.objects.filter(title__startswith="Alph")) == ["Alpha", "Alphabet"]
    query = Book.objects.filter(title__startswith="Alph")
    assert "index_book_title" in query.explain()
    assert titles(Book.objects.filter(genre="sf", title__startswith="D")) == ["Delta"]


def test_a_query_no_index_serves_names_the_kind_and_the_index(books):
    with pytest.raises(NoIndexForQuery) as caught:
        list(Book.objects.filter(genre="sf", stars=2))
    message = str(caught.value)
    assert message.startswith("Book.objects:")
    assert "Index(table='index_genre_stars'" in message and "kind 'book'" in message
    with pytest.raises(InvalidQuery, match=r"Book\.objects: 'title__icontains'"):
        Book.objects.filter(title__icontains="a")
    with pytest.raises(InvalidQuery, match="one property"):
        Book.objects.order_by("genre", "title")


def test_filter_index_stays_and_refuses_q_with_the_fix(books):
    assert titles(Book.objects.filter_index(genre="sf").order_by("title")) == [
        "Alpha",
        "Beta",
        "Delta",
    ]
    with pytest.raises(InvalidQuery, match=r"Book.objects.filter\(Q\(...\) \| Q\(...\)\)"):
        Book.objects.filter_index(Q(genre="sf") | Q(genre="crime"))


def test_using_a_shard_counts_with_meta_ordering(books):
    # Meta.ordering names a property, which no column holds: a shard's queryset ignores it.
    counted = sum(Book.objects.using(alias).count() for alias in shards.shard_aliases())
    assert counted == 5
    alias = books["Alpha"].shard
    assert books["Alpha"].id in {b.id for b in Book.objects.using(alias)}
    with pytest.raises(InvalidQuery, match=r"Book.objects.order_by\('title'\)"):
        Book.objects.using(alias).order_by("title")
    on_one = Book.objects.filter(genre="sf").using(alias)
    assert {b.id for b in on_one} == {b.id for b in books.values() if b.shard == alias} & {
        books[t].id for t in ("Alpha", "Beta", "Delta")
    }


def test_pages(books):
    page = Book.objects.filter(genre="sf").order_by("title").page(size=2)
    assert titles(page) == ["Alpha", "Beta"] and page.has_next
    rest = Book.objects.filter(genre="sf").order_by("title").page(after=page.next_cursor, size=2)
    assert titles(rest) == ["Delta"] and not rest.has_next
    with pytest.raises(InvalidQuery, match="page\\(\\) pages a query one index serves"):
        Book.objects.filter(Q(genre="sf") | Q(genre="crime")).page(size=2)


@pytest.mark.asyncio
async def test_the_async_twins(books):
    assert await Book.objects.acount() == 5 and await Book.objects.aexists()
    assert (await Book.objects.aget(title="Beta")).id == books["Beta"].id
    assert (await Book.objects.filter(genre="sf").alast()).title == "Delta"
    assert (await Book.objects.alatest("stars")).title == "Epsilon"
    assert set(await Book.objects.ain_bulk([books["Alpha"].id])) == {books["Alpha"].id}
    assert [b.title async for b in Book.objects.filter(genre="crime")] == ["Epsilon", "Gamma"]
    assert await Book.objects.filter(genre="crime").aupdate(stars=9) == 2
    _author, created = await Author.objects.aget_or_create(name="Ada")
    assert created and await Author.objects.acount() == 1
    assert await Book.objects.filter(genre="crime").adelete() == (2, {"kindsapp.Book": 2})
    assert await Book.objects.acount() == 3


def test_values_and_what_no_kind_query_serves(books):
    assert Book.objects.filter(genre="crime").values_list("title", flat=True) == [
        "Epsilon",
        "Gamma",
    ]
    assert Book.objects.filter(genre="crime").values("pk", "stars") == [
        {"pk": books["Epsilon"].id, "stars": 5},
        {"pk": books["Gamma"].id, "stars": 3},
    ]
    (row,) = Book.objects.filter(title="Beta").values_list("title", "stars", named=True)
    assert (row.title, row.stars) == ("Beta", 2)
    with pytest.raises(InvalidQuery, match="Book has no field 'nope'"):
        Book.objects.values("nope")
    for refused in ("aggregate", "annotate", "distinct", "select_for_update"):
        with pytest.raises(InvalidQuery, match=rf"Book\.objects\.\.\.{refused}\(\) is not served"):
            getattr(Book.objects.filter(genre="sf"), refused)()
    assert not hasattr(Book.objects.all(), "annotate")  # an AttributeError too

"""The kinds of the queryset, typed-value and reference tests (issue 44): ``Author``,
``Book`` (a field of each type an index orders, ``Meta.ordering``, a reference to its author)
and ``Review`` (a reference to its book)."""

from __future__ import annotations

from django.db import models

from schemaless_store import Index
from schemaless_store.kinds import Kind, ReferenceField


class Author(Kind):
    name = models.CharField(max_length=60)

    class Meta:
        indexes = [Index("index_author_name", ["name"], shard_on="name", unique=True)]


class Book(Kind):
    title = models.CharField(max_length=100)
    genre = models.CharField(max_length=20, blank=True)
    stars = models.IntegerField(default=3)
    published = models.DateField(null=True, blank=True)
    price = models.DecimalField(max_digits=8, decimal_places=2, null=True, blank=True)
    isbn = models.UUIDField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    author = ReferenceField(Author, null=True, blank=True)

    class Meta:
        extra = "forbid"
        ordering = ["title"]
        indexes = [
            Index("index_book_title", ["title"], shard_on="title", unique=True),
            Index("index_book_genre", ["genre"], shard_on="genre"),
            Index("index_book_genre_title", ["genre", "title"], shard_on="genre"),
            Index("index_book_genre_published", ["genre", "published"], shard_on="genre"),
            Index("index_book_published", ["published"], shard_on="published"),
            Index("index_book_price", ["price"], shard_on="price"),
            Index("index_book_isbn", ["isbn"], shard_on="isbn"),
            Index("index_book_created", ["created"], shard_on="created"),
            Index("index_book_stars", ["stars"], shard_on="stars"),
            Index("index_book_author", ["author"], shard_on="author"),
        ]


class Review(Kind):
    book = ReferenceField("kindsapp.Book")
    stars = models.IntegerField(default=3)
    text = models.TextField(blank=True)

    class Meta:
        indexes = [Index("index_review_book", ["book"], shard_on="book")]

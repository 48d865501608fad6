"""The kind the admin and REST tests of issue 44 work with (tests/kinds/test_admin_*.py,
test_rest_*.py): ``Novel``, a book as a Django developer would declare it, with choices, a
date, a unique index and a page on the site."""

from __future__ import annotations

from django.db import models

from schemaless_store import Index
from schemaless_store.kinds import Kind, ReferenceField
from schemaless_store.values.index_values import KeyColumn

GENRES = [("sf", "Science fiction"), ("crime", "Crime"), ("poetry", "Poetry")]


class Novel(Kind):
    title = models.CharField(max_length=200)
    genre = models.CharField(max_length=10, choices=GENRES, default="sf")
    isbn = models.CharField(max_length=20, blank=True)
    stars = models.IntegerField(default=3)
    in_print = models.BooleanField(default=True)
    published = models.DateTimeField(null=True, blank=True)

    class Meta:
        kind_name = "novel"
        extra = "forbid"
        indexes = [
            # max_bytes 40: a title within max_length can be too long for the index.
            Index("index_novel_title", ["title"], shard_on="title", types={"title": KeyColumn(40)}),
            Index("index_novel_isbn", ["isbn"], shard_on="isbn", unique=True),
            # The default column ("key") holds None too: published may be empty.
            Index("index_novel_genre", ["genre", "published"], shard_on="genre"),
            Index("index_novel_in_print", ["in_print"], shard_on="in_print"),
            Index(
                "index_novel_published",
                ["published"],
                shard_on="published",
            ),
            Index("index_novel_stars", ["stars"], shard_on="stars"),
        ]

    def __str__(self) -> str:
        return str(self.title)

    def get_absolute_url(self) -> str:
        return f"/novels/{self.id}/"

    def shout(self) -> str:
        return str(self.title).upper()


class Critique(Kind):
    """A review of a novel: a reference, shown in the admin as a link and edited by id."""

    novel = ReferenceField(Novel)
    text = models.CharField(max_length=100)

    class Meta:
        kind_name = "critique"
        indexes = [Index("index_critique_novel", ["novel"], shard_on="novel")]

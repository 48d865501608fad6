"""The kinds tests/kinds works with: ``Note`` (a field of every supported type, ``extra =
\"forbid\"``) and ``Tag`` (undeclared properties kept)."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from schemaless_store import Index
from schemaless_store.kinds import Kind


class Note(Kind):
    """A kind with a field of every supported type, refusing undeclared properties."""

    title = models.CharField(max_length=50)
    body = models.TextField(blank=True)
    link = models.URLField(blank=True)
    contact = models.EmailField(blank=True)
    stars = models.IntegerField(default=3, validators=[MinValueValidator(1), MaxValueValidator(5)])
    score = models.FloatField(null=True, blank=True)
    public = models.BooleanField(default=False)
    posted = models.DateTimeField(null=True, blank=True)
    day = models.DateField(null=True, blank=True)
    user_id = models.UUIDField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    color = models.CharField(
        max_length=10, choices=[("red", "Red"), ("blue", "Blue")], default="red"
    )

    class Meta:
        extra = "forbid"
        indexes = [
            Index("index_note_user", ["user_id"], shard_on="user_id"),
            Index("index_note_title", ["title"], shard_on="title", unique=True),
        ]


class Tag(Kind):
    """A kind that keeps undeclared properties (like ndb's Expando)."""

    name = models.CharField(max_length=30)
    user_id = models.UUIDField()

    class Meta:
        kind_name = "tag"
        indexes = [Index("index_tag_user", ["user_id"], shard_on="user_id")]


from .library import Author, Book, Review  # noqa: E402 - the issue 44 kinds

__all__ = ["Author", "Book", "Note", "Review", "Tag"]

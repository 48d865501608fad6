"""The feed's kinds (docs/kinds.md): typed models whose instances are the store's entities.

=========  ================================================================================
kind       fields
=========  ================================================================================
User       username (lowercase, unique), email (lowercase, unique), name, joined
Entry      user (a reference to the User), title, link, published
Like       entry_id, user_id, created; its id is derived from (entry, user): one per pair
Comment    entry_id, user_id, body, created
=========  ================================================================================

An entry's ``user`` is a ``ReferenceField``: ``entry.user`` is the ``User`` (a page reads its
entries' users in one ``get_many``, ``select_related("user")``), ``entry.user_id`` the id. The
other ids (``user_id``, ``entry_id``) are ``uuid.UUID`` values; times are aware datetimes
(``DateTimeField``), in ``datetime`` index columns (microseconds) so newest-first is exact.
Entities stored before these types (ints of microseconds, an entry's ``user_id``) are brought
to them by :mod:`project.feed.upgrade` (docs/demo.md). Each kind's indexes are declared on it
(``Meta.indexes``) and pinned to it: a like never turns up on a user's page because it happens
to have a ``user_id``. The kinds need no ``indexes.py``.

One index is *live*: ``index_feed_link`` ("who else shared this link") is not declared until the
environment says so, to show how an index is added to a running store (docs/demo.md)::

    FEED_LIVE_INDEXES=link bash scripts/demo.sh     # declare it: migrateall creates its tables
    FEED_LIVE_INDEXES=link .venv/bin/python manage.py runcleaner --index=index_feed_link --once
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import uuid

from django.core.validators import RegexValidator
from django.db import models
from django.urls import reverse

from schemaless_store import Index
from schemaless_store.exceptions import EntityExists
from schemaless_store.kinds import Kind, ReferenceField

LINK_INDEX_NAME = "index_feed_link"
# Like ids are uuid5(this namespace, "<entry id>:<user id>"): liking twice finds the same entity.
LIKE_NAMESPACE = uuid.UUID("6f0c3a52-1d7e-4f55-9a43-0b8f1c2e5d70")


def now() -> dt.datetime:
    """Now, an aware datetime in UTC: the feed's timestamps."""
    return dt.datetime.now(dt.UTC)


def make_link_index() -> Index:
    """The live index: entries by link, first sharer first ("who else shared this link")."""
    return Index(
        table=LINK_INDEX_NAME,
        properties=["link", "published"],
        shard_on="link",
        types={"published": "datetime"},
        kind="entry",
    )


def live_indexes_requested() -> set[str]:
    """Names listed in ``FEED_LIVE_INDEXES`` (comma-separated; only ``link`` exists)."""
    raw = os.environ.get("FEED_LIVE_INDEXES", "")
    return {name.strip().lower() for name in raw.split(",") if name.strip()}


class User(Kind):
    username = models.CharField(
        max_length=30,
        validators=[
            RegexValidator(r"^[A-Za-z0-9_]{2,30}$", "Use 2 to 30 letters, digits or underscores.")
        ],
        help_text="2 to 30 letters, digits or underscores.",
    )
    email = models.EmailField(max_length=200)
    name = models.CharField(max_length=80, blank=True, help_text="Shown next to your entries.")
    joined = models.DateTimeField(default=now)

    class Meta:
        kind_name = "user"
        extra = "forbid"
        indexes = [
            # Sign-up: a second user with the same username or email is refused (UniqueViolation).
            Index("index_feed_username", ["username"], shard_on="username", unique=True),
            Index("index_feed_email", ["email"], shard_on="email", unique=True),
        ]

    def __str__(self) -> str:
        return str(self.username)

    def get_absolute_url(self) -> str:
        return reverse("feed:user", args=[self.username])

    @classmethod
    def named(cls, username: str) -> User | None:
        """The user with this username, in any letter case (usernames are stored lowercase)."""
        return cls.objects.filter_index(username=username.lower()).first()


class Entry(Kind):
    user = ReferenceField(User)
    title = models.CharField(max_length=200)
    link = models.URLField(max_length=200)
    published = models.DateTimeField(default=now)

    class Meta:
        kind_name = "entry"
        extra = "forbid"
        verbose_name_plural = "entries"
        indexes = [
            # A user's entries, newest first: on the shard of the user's id, so one shard answers.
            Index(
                "index_feed_entry_user",
                ["user", "published"],
                shard_on="user",
                types={"published": "datetime"},
            ),
            # The public feed: rows spread over the shards by time, read back by scatter-gather.
            Index(
                "index_feed_published",
                ["published"],
                shard_on="published",
                types={"published": "datetime"},
            ),
            # The live index, only when FEED_LIVE_INDEXES asks for it.
            *([make_link_index()] if "link" in live_indexes_requested() else []),
        ]

    def __str__(self) -> str:
        return str(self.title)

    def get_absolute_url(self) -> str:
        return reverse("feed:entry", args=[self.id])

    @property
    def safe_href(self) -> str:
        """The link, only if it is http(s): an entity written past the kind's validation (a
        script, the raw entity admin) could hold ``javascript:...``, and autoescaping does not
        stop that in an href."""
        link = str(self.link)
        return link if link.startswith(("https://", "http://")) else ""


class Like(Kind):
    entry_id = models.UUIDField()
    user_id = models.UUIDField()
    created = models.DateTimeField(default=now)

    class Meta:
        kind_name = "like"
        extra = "forbid"
        indexes = [
            # An entry's likes, oldest first, on the entry's shard.
            Index(
                "index_feed_entry_likes",
                ["entry_id", "created"],
                shard_on="entry_id",
                types={"created": "datetime"},
            )
        ]

    @staticmethod
    def id_for(entry_id: uuid.UUID, user_id: uuid.UUID) -> uuid.UUID:
        """The id of a user's like of an entry: one like per (entry, user)."""
        return uuid.uuid5(LIKE_NAMESPACE, f"{entry_id}:{user_id}")

    @classmethod
    def toggle(cls, entry: Entry, user: User) -> bool:
        """Like the entry, or unlike it if the user already does; True if it is liked now."""
        ident = cls.id_for(entry.id, user.id)
        existing = cls.objects.get_many([ident]).get(ident)
        if existing is not None:
            existing.delete()
            return False
        # EntityExists: a double click raced us; the like is there, which is what was asked.
        with contextlib.suppress(EntityExists):
            cls.objects.create(id=ident, entry_id=entry.id, user_id=user.id)
        return True


class Comment(Kind):
    entry_id = models.UUIDField()
    user_id = models.UUIDField()
    body = models.TextField(max_length=1000)
    created = models.DateTimeField(default=now)

    class Meta:
        kind_name = "comment"
        extra = "forbid"
        indexes = [
            Index(
                "index_feed_entry_comments",
                ["entry_id", "created"],
                shard_on="entry_id",
                types={"created": "datetime"},
            )
        ]

"""The store calls the feed's pages make, on its kinds (:mod:`.models`): each manager sees only
its own kind, and each query uses the indexes declared on it.

Views call these functions; everything here goes through the store's public API (``create``,
``get_many``, ``filter_index``, ``page``, ``save``, ``delete``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import heapq
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from schemaless_store.exceptions import EntityExists
from schemaless_store.query.indexquery import Page

from .models import Comment as CommentKind
from .models import Entry, Like, User

USER, ENTRY, LIKE, COMMENT = "user", "entry", "like", "comment"
# Like ids are uuid5(this namespace, "<entry id>:<user id>"): liking twice finds the same entity.
LIKE_NAMESPACE = uuid.UUID("6f0c3a52-1d7e-4f55-9a43-0b8f1c2e5d70")


def as_datetime(microseconds: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(microseconds / 1_000_000, tz=dt.UTC)


# --- users -----------------------------------------------------------------------------------


def create_user(username: str, email: str, name: str = "") -> User:
    """A new user; :class:`~schemaless_store.exceptions.UniqueViolation` if the username or the
    email is taken (the unique indexes decide, so two racing sign-ups cannot both win)."""
    return User.objects.create(username=username.lower(), email=email.lower(), name=name)


def user_by_username(username: str) -> User | None:
    return User.objects.filter_index(username=username.lower()).first()


def users_by_id(ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, User]:
    """The users among ``ids`` (one query per shard); anything that is not a user is left out."""
    return User.objects.get_many(set(ids))


def user_by_id(ident: uuid.UUID) -> User | None:
    return users_by_id([ident]).get(ident)


def users_page(after: str | None = None, size: int = 50) -> Page:
    """Every user, by username."""
    return User.objects.filter_index().order_by("username").page(after=after, size=size)


# --- entries ---------------------------------------------------------------------------------


def post_entry(user: User, title: str, link: str) -> Entry:
    return Entry.objects.create(user_id=user.id, title=title, link=link)


def entry_by_id(ident: uuid.UUID) -> Entry | None:
    return Entry.objects.get_many([ident]).get(ident)


def public_page(after: str | None = None, size: int = 20) -> Page:
    """Everyone's entries, newest first: read from every shard and merged."""
    return Entry.objects.filter_index().order_by("-published").page(after=after, size=size)


def user_page(user: User, after: str | None = None, size: int = 20) -> Page:
    """One user's entries, newest first: one shard (the one that owns the user's id) answers."""
    return (
        Entry.objects.filter_index(user_id=user.id)
        .order_by("-published")
        .page(after=after, size=size)
    )


def sharers_page(link: str, after: str | None = None, size: int = 20) -> Page:
    """Entries with this exact link, first shared first. Needs the live index
    ``index_feed_link``: raises ``NoIndexForQuery`` until it is declared and ``IndexNotReady``
    until the cleaner has backfilled it."""
    return Entry.objects.filter_index(link=link).order_by("published").page(after=after, size=size)


# --- likes and comments ------------------------------------------------------------------------


def like_id(entry_id: uuid.UUID, user_id: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(LIKE_NAMESPACE, f"{entry_id}:{user_id}")


def toggle_like(entry: Entry, user: User) -> bool:
    """Like the entry, or unlike it if the user already does; True if it is liked now."""
    ident = like_id(entry.id, user.id)
    existing = Like.objects.get_many([ident]).get(ident)
    if existing is not None:
        existing.delete()
        return False
    # EntityExists: a double click raced us; the like is there, which is what was asked.
    with contextlib.suppress(EntityExists):
        Like.objects.create(id=ident, entry_id=entry.id, user_id=user.id)
    return True


def add_comment(entry: Entry, user: User, body: str) -> CommentKind:
    return CommentKind.objects.create(entry_id=entry.id, user_id=user.id, body=body)


def activity_of(entry_ids: Iterable[uuid.UUID]) -> list[Like | CommentKind]:
    """Likes and comments of these entries, oldest first: one index query per kind, merged."""
    ids = list(dict.fromkeys(entry_ids))
    if not ids:
        return []
    likes = Like.objects.filter_index(entry_id__in=ids).order_by("created")
    comments = CommentKind.objects.filter_index(entry_id__in=ids).order_by("created")
    return list(heapq.merge(likes, comments, key=lambda item: item.created))


# --- what templates show ---------------------------------------------------------------------


@dataclass
class Comment:
    body: str
    author: User | None
    created: dt.datetime


@dataclass
class EntryView:
    """An entry with its author, likes and comments resolved, ready for a template."""

    entity: Any  # an Entry
    author: User | None
    likers: list[Any] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    liked_by_viewer: bool = False

    @property
    def id(self) -> uuid.UUID:
        return self.entity.id

    @property
    def title(self) -> str:
        return str(self.entity.get("title", ""))

    @property
    def link(self) -> str:
        return str(self.entity.get("link", ""))

    @property
    def safe_href(self) -> str:
        """The link, only if it is http(s): an entity edited elsewhere (the admin, a script)
        could hold ``javascript:...``, and autoescaping does not stop that in an href."""
        link = self.link
        return link if link.startswith(("https://", "http://")) else ""

    @property
    def published(self) -> dt.datetime:
        return as_datetime(int(self.entity.get("published", 0)))


def entry_views(entries: list[Any], viewer: User | None = None) -> list[EntryView]:
    """Resolve authors, likes and comments of ``entries`` with an index query per kind (likes,
    comments) and one ``get_many`` (one query per shard), whatever the number of entries."""
    activity = activity_of(e.id for e in entries)
    people = {e.get("user_id") for e in entries} | {a.get("user_id") for a in activity}
    users = users_by_id(p for p in people if isinstance(p, uuid.UUID))
    views = {e.id: EntryView(entity=e, author=users.get(e.get("user_id"))) for e in entries}
    by_entry: dict[Any, list[Any]] = defaultdict(list)
    for item in activity:
        by_entry[item.get("entry_id")].append(item)
    for entry_id, items in by_entry.items():
        view = views.get(entry_id)
        if view is None:
            continue
        for item in items:
            person = users.get(item.get("user_id"))
            if isinstance(item, Like):
                if person is not None:
                    view.likers.append(person)
                if viewer is not None and item.get("user_id") == viewer.id:
                    view.liked_by_viewer = True
            else:
                view.comments.append(
                    Comment(
                        body=str(item.get("body", "")),
                        author=person,
                        created=as_datetime(int(item.get("created", 0))),
                    )
                )
    return [views[e.id] for e in entries]

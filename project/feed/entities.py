"""The feed's entities, as property bags, and the store calls that read and write them.

=========  ================================================================================
kind       properties
=========  ================================================================================
user       username (lowercase, unique), email (lowercase, unique), name, joined
entry      user_id, title, link, published
like       entry_id, user_id, created; its id is derived from (entry, user): one per pair
comment    entry_id, user_id, body, created
=========  ================================================================================

Ids (``user_id``, ``entry_id``) are ``uuid.UUID`` values; times are ints, microseconds since the
epoch (:func:`now_us`). Views call these functions; everything here goes through the store's
public API (``create``, ``get_many``, ``filter_index``, ``page``, ``save``, ``delete``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from schemaless_store.exceptions import EntityExists
from schemaless_store.models import Entity
from schemaless_store.query.indexquery import Page

USER, ENTRY, LIKE, COMMENT = "user", "entry", "like", "comment"
# Like ids are uuid5(this namespace, "<entry id>:<user id>"): liking twice finds the same entity.
LIKE_NAMESPACE = uuid.UUID("6f0c3a52-1d7e-4f55-9a43-0b8f1c2e5d70")


def now_us() -> int:
    """Now, in microseconds since the epoch: the feed's timestamps."""
    return time.time_ns() // 1000


def as_datetime(microseconds: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(microseconds / 1_000_000, tz=dt.UTC)


# --- users -----------------------------------------------------------------------------------


def create_user(username: str, email: str, name: str = "") -> Entity:
    """A new user; :class:`~schemaless_store.exceptions.UniqueViolation` if the username or the
    email is taken (the unique indexes decide, so two racing sign-ups cannot both win)."""
    return Entity.objects.create(
        kind=USER,
        username=username.lower(),
        email=email.lower(),
        name=name,
        joined=now_us(),
    )


def user_by_username(username: str) -> Entity | None:
    return Entity.objects.filter_index(kind=USER, username=username.lower()).first()


def users_by_id(ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Entity]:
    """The users among ``ids`` (one query per shard); anything that is not a user is left out."""
    found = Entity.objects.get_many(set(ids))
    return {ident: e for ident, e in found.items() if e.get("kind") == USER}


def user_by_id(ident: uuid.UUID) -> Entity | None:
    return users_by_id([ident]).get(ident)


def users_page(after: str | None = None, size: int = 50) -> Page:
    """Every user, by username."""
    return Entity.objects.filter_index(kind=USER).order_by("username").page(after=after, size=size)


# --- entries ---------------------------------------------------------------------------------


def post_entry(user: Entity, title: str, link: str) -> Entity:
    return Entity.objects.create(
        kind=ENTRY, user_id=user.id, title=title, link=link, published=now_us()
    )


def entry_by_id(ident: uuid.UUID) -> Entity | None:
    entity = Entity.objects.get_many([ident]).get(ident)
    return entity if entity is not None and entity.get("kind") == ENTRY else None


def public_page(after: str | None = None, size: int = 20) -> Page:
    """Everyone's entries, newest first: read from every shard and merged."""
    return (
        Entity.objects.filter_index(kind=ENTRY).order_by("-published").page(after=after, size=size)
    )


def user_page(user: Entity, after: str | None = None, size: int = 20) -> Page:
    """One user's entries, newest first: one shard (the one that owns the user's id) answers."""
    return (
        Entity.objects.filter_index(kind=ENTRY, user_id=user.id)
        .order_by("-published")
        .page(after=after, size=size)
    )


def sharers_page(link: str, after: str | None = None, size: int = 20) -> Page:
    """Entries with this exact link, first shared first. Needs the live index
    ``index_feed_link``: raises ``NoIndexForQuery`` until it is declared and ``IndexNotReady``
    until the cleaner has backfilled it."""
    return (
        Entity.objects.filter_index(kind=ENTRY, link=link)
        .order_by("published")
        .page(after=after, size=size)
    )


# --- likes and comments ------------------------------------------------------------------------


def like_id(entry_id: uuid.UUID, user_id: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(LIKE_NAMESPACE, f"{entry_id}:{user_id}")


def toggle_like(entry: Entity, user: Entity) -> bool:
    """Like the entry, or unlike it if the user already does; True if it is liked now."""
    ident = like_id(entry.id, user.id)
    existing = Entity.objects.get_many([ident]).get(ident)
    if existing is not None:
        existing.delete()
        return False
    # EntityExists: a double click raced us; the like is there, which is what was asked.
    with contextlib.suppress(EntityExists):
        Entity.objects.create(
            id=ident, kind=LIKE, entry_id=entry.id, user_id=user.id, created=now_us()
        )
    return True


def add_comment(entry: Entity, user: Entity, body: str) -> Entity:
    return Entity.objects.create(
        kind=COMMENT, entry_id=entry.id, user_id=user.id, body=body, created=now_us()
    )


def activity_of(entry_ids: Iterable[uuid.UUID]) -> list[Entity]:
    """Likes and comments of these entries, oldest first, in one index query."""
    ids = list(dict.fromkeys(entry_ids))
    if not ids:
        return []
    return list(
        Entity.objects.filter_index(kind__in=[LIKE, COMMENT], entry_id__in=ids).order_by("created")
    )


# --- what templates show ---------------------------------------------------------------------


@dataclass
class Comment:
    body: str
    author: Entity | None
    created: dt.datetime


@dataclass
class EntryView:
    """An entry with its author, likes and comments resolved, ready for a template."""

    entity: Entity
    author: Entity | None
    likers: list[Entity] = field(default_factory=list)
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


def entry_views(entries: list[Entity], viewer: Entity | None = None) -> list[EntryView]:
    """Resolve authors, likes and comments of ``entries`` with one index query and one
    ``get_many`` (one query per shard), whatever the number of entries."""
    activity = activity_of(e.id for e in entries)
    people = {e.get("user_id") for e in entries} | {a.get("user_id") for a in activity}
    users = users_by_id(p for p in people if isinstance(p, uuid.UUID))
    views = {e.id: EntryView(entity=e, author=users.get(e.get("user_id"))) for e in entries}
    by_entry: dict[Any, list[Entity]] = defaultdict(list)
    for item in activity:
        by_entry[item.get("entry_id")].append(item)
    for entry_id, items in by_entry.items():
        view = views.get(entry_id)
        if view is None:
            continue
        for item in items:
            person = users.get(item.get("user_id"))
            if item["kind"] == LIKE:
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

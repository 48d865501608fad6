"""The entity admin's list, by what its search box holds: an entity id (one read), conditions
on an index (a page of that index, numbered ``?p=``), or nothing (the newest entities of the
shards, continued by cursors). Each search gives a :class:`Listing`; the view renders it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.http import HttpRequest

from ..exceptions import IndexNotReady, InvalidQuery, SchemalessError, ShardUnavailable
from ..models.entity import Entity
from ..topology import bucket_map
from .browse import Cursor, newest_page
from .common import page_number, with_query
from .search import Search, SearchError, index_query, index_results, parse_search


@dataclass
class Listing:
    """What one search found, and the links to the pages beside it. ``ran``: the listing or
    search was made (a refused or failed search lists nothing, and must not read as if it
    found nothing)."""

    entities: list[Entity] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    search_note: str = ""
    explanation: str = ""
    ran: bool = True
    next_url: str = ""
    prev_url: str = ""
    first_url: str = ""

    def failed(self, message: str) -> Listing:
        self.errors.append(message)
        self.ran = False
        return self

    def context(self) -> dict[str, Any]:
        return {
            "errors": self.errors,
            "search_note": self.search_note,
            "explanation": self.explanation,
            "ran": self.ran,
            "next_url": self.next_url,
            "prev_url": self.prev_url,
            "first_url": self.first_url,
        }


def entity_listing(request: HttpRequest, aliases: list[str], size: int) -> Listing:
    """The listing the request's search box (``q``) asks for, on ``aliases``."""
    try:
        search = parse_search(request.GET.get("q", ""))
    except SearchError as exc:
        return Listing().failed(str(exc))
    if search.by_id:
        return by_id(search, aliases)
    if search.conditions:
        return by_index(request, search, aliases, size)
    return newest(request, aliases, size)


def by_id(search: Search, aliases: list[str]) -> Listing:
    """The entity of the searched id, if it is on one of ``aliases``."""
    listing = Listing()
    try:
        found = Entity.objects.get_many([search.entity_id])
    except ShardUnavailable as exc:
        return listing.failed(str(exc))
    listing.entities = [e for e in found.values() if e.shard in aliases]
    home = bucket_map.alias_for(search.entity_id)  # type: ignore[arg-type]
    if not found:
        listing.search_note = f"No entity has this id (it would be on {home})."
    elif not listing.entities:
        listing.search_note = f"The entity is on {home}, outside the shard filter."
    return listing


def by_index(request: HttpRequest, search: Search, aliases: list[str], size: int) -> Listing:
    """Page ``?p=`` of the entities an index finds for the search's conditions."""
    listing = Listing()
    number = page_number(request)
    try:
        query = index_query(search)
        listing.explanation = query.explain()
        listing.entities, more = index_results(query, aliases, (number - 1) * size, size)
    except (InvalidQuery, IndexNotReady) as exc:
        # Refused (no index serves it, not ready, a bad value): the explanation says why.
        first_line = str(exc).split("\n", 1)[0]
        return listing.failed(f"Search refused: {first_line}")
    except (SchemalessError, ValueError, TypeError) as exc:
        return listing.failed(f"Search failed: {exc}")
    listing.search_note = f"Found through index {query.index.name}, in its order."
    if more:
        listing.next_url = with_query(request, p=number + 1)
    if number > 1:
        listing.prev_url = with_query(request, p=number - 1 if number > 2 else None)
        listing.first_url = with_query(request, p=None)
    return listing


def newest(request: HttpRequest, aliases: list[str], size: int) -> Listing:
    """The newest entities of ``aliases``, merged, a page before or after a cursor."""
    listing = Listing()
    after, before = _cursor(request, "after"), _cursor(request, "before")
    page = newest_page(aliases, size, after=after, before=before)
    listing.entities = page.entities
    listing.errors.extend(f"Shard unavailable: {e}" for e in page.errors)
    if page.older:
        listing.next_url = with_query(request, after=page.older.encode(), before=None)
    if page.newer:
        listing.prev_url = with_query(request, before=page.newer.encode(), after=None)
    if after or before:
        listing.first_url = with_query(request, after=None, before=None)
    return listing


def _cursor(request: HttpRequest, name: str) -> Cursor | None:
    text = request.GET.get(name)
    if not text:
        return None
    try:
        return Cursor.decode(text)
    except ValueError:
        messages.error(request, "That page link is not valid any more; showing the first page.")
        return None

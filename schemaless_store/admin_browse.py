"""Browsing entities for the admin: pages across shards, newest first, and the search box.

Pages are *keyset* pages: each shard is read with ``ORDER BY updated DESC, added_id DESC LIMIT
n + 1`` after the last row shown (the ``updated`` key serves it), the shards' rows are merged, and
the extra row says whether there is a next page. No page ever counts or skips rows, so the last
page of a billion entities costs what the first does. The position of a row in the merged order is
``(updated, shard position, added_id)``; a :class:`Cursor` carries it in the URL.

Search (:func:`parse_search`): an entity id in any form ``uuid.UUID`` reads, routed to its shard;
``property=value`` (or ``property:value``), with optional ``__lookup``, through ``filter_index``;
or a JSON object of such conditions. See ``docs/admin.md``.
"""

from __future__ import annotations

import datetime as dt
import heapq
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from django.db import DatabaseError
from django.db.models import Q

from . import jsonview, keys, shards
from .exceptions import InvalidEntityId, SchemalessError

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _entity_model() -> Any:
    from .models import Entity

    return Entity


# --- keyset pages, newest first -------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Cursor:
    """A row's place in the merged, newest-first order of every shard."""

    updated: dt.datetime
    position: int  # the shard's position in SCHEMALESS["SHARDS"]
    added_id: int

    def encode(self) -> str:
        delta = self.updated - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return f"{micros}_{self.position}_{self.added_id}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """Parse :meth:`encode`'s output; ``ValueError`` for anything else."""
        parts = text.split("_")
        if len(parts) != 3:
            raise ValueError(f"bad page cursor {text!r}")
        micros, position, added_id = (int(p) for p in parts)
        if not 0 <= position < len(shards.shard_aliases()):
            raise ValueError(f"bad page cursor {text!r}")
        return cls(_EPOCH + dt.timedelta(microseconds=micros), position, added_id)

    @classmethod
    def of(cls, entity: Any) -> Cursor:
        return cls(entity.row_updated, shards.shard_aliases().index(entity.shard), entity.added_id)


@dataclass
class Page:
    entities: list[Any]
    older: Cursor | None = None  # the next page starts after this row
    newer: Cursor | None = None  # the previous page ends before this row
    errors: list[str] = field(default_factory=list)


def _beyond(cursor: Cursor, position: int, older: bool) -> Q:
    """Rows of the shard at ``position`` that come after (``older``) or before ``cursor``."""
    strict, loose = (
        ("row_updated__lt", "row_updated__lte")
        if older
        else (
            "row_updated__gt",
            "row_updated__gte",
        )
    )
    same_shard = "added_id__lt" if older else "added_id__gt"
    ahead = position < cursor.position if older else position > cursor.position
    if ahead:  # ties on updated sort this shard's rows after the cursor's
        return Q(**{loose: cursor.updated})
    if position == cursor.position:
        return Q(**{strict: cursor.updated}) | Q(
            row_updated=cursor.updated, **{same_shard: cursor.added_id}
        )
    return Q(**{strict: cursor.updated})


def newest_page(
    aliases: Sequence[str],
    size: int,
    after: Cursor | None = None,
    before: Cursor | None = None,
) -> Page:
    """One page of entities from ``aliases``, newest ``updated`` first.

    ``after``: the page that follows that row; ``before``: the page that precedes it. A shard that
    cannot be read is named in ``errors`` and left out.
    """
    Entity = _entity_model()
    older = before is None
    cursor = after if older else before
    all_aliases = shards.shard_aliases()
    streams, errors = [], []
    for alias in aliases:
        position = all_aliases.index(alias)
        rows = Entity.objects.using(alias)
        if cursor is not None:
            rows = rows.filter(_beyond(cursor, position, older))
        order = ("-row_updated", "-added_id") if older else ("row_updated", "added_id")
        try:
            with shards.errors_named(alias):
                fetched = list(rows.order_by(*order)[: size + 1])
        except (SchemalessError, DatabaseError) as exc:
            errors.append(f"{alias}: {exc}")
            continue
        streams.append([(Cursor(e.row_updated, position, e.added_id), e) for e in fetched])
    merged = list(heapq.merge(*streams, key=lambda pair: pair[0], reverse=older))[: size + 1]
    more = len(merged) > size
    entities = [entity for _key, entity in merged[:size]]
    if not older:
        entities.reverse()
    page = Page(entities=entities, errors=errors)
    if entities:
        first, last = Cursor.of(entities[0]), Cursor.of(entities[-1])
        if older:
            page.older = last if more else None
            page.newer = first if after is not None else None
        else:
            page.newer = first if more else None
            page.older = last
    return page


# --- the search box -------------------------------------------------------------------------


class SearchError(SchemalessError, ValueError):
    """The search text is neither an entity id nor index conditions."""


_CONDITION = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*(.*)\Z", re.DOTALL)


@dataclass
class Search:
    text: str
    entity_id: bytes | None = None
    conditions: dict[str, Any] = field(default_factory=dict)

    @property
    def by_id(self) -> bool:
        return self.entity_id is not None


def _entity_id(text: str) -> bytes | None:
    try:
        return keys.entity_id_bytes(text)
    except InvalidEntityId:
        pass
    try:  # the forms uuid.UUID reads besides hex and dashed: {braces}, urn:uuid:...
        return uuid.UUID(text).bytes
    except ValueError:
        return None


def _value(text: str) -> Any:
    """A condition value: JSON (with the $-forms of :mod:`.jsonview`) if it parses, else text."""
    try:
        data = jsonview.parse(text)
    except jsonview.JSONViewError:
        return text
    return jsonview.from_json(data, "value")


def parse_search(text: str) -> Search:
    """What the admin search box asks for (see the module docs); :class:`SearchError` if unclear."""
    text = text.strip()
    search = Search(text=text)
    if not text:
        return search
    search.entity_id = _entity_id(text)
    if search.entity_id is not None:
        return search
    try:
        if text.startswith("{"):
            data = jsonview.parse(text)
            if not isinstance(data, dict) or not data:
                raise SearchError("a JSON search is an object of conditions")
            search.conditions = {k: jsonview.from_json(v, k) for k, v in data.items()}
            return search
        match = _CONDITION.match(text)
        if match:
            search.conditions = {match.group(1): _value(match.group(2).strip())}
            return search
    except jsonview.JSONViewError as exc:
        raise SearchError(str(exc)) from None
    raise SearchError(
        f"{text!r} is neither an entity id nor a condition like property=value; see the help "
        "under the search box"
    )


def index_results(
    conditions: dict[str, Any], aliases: Sequence[str], offset: int, size: int
) -> tuple[list[Any], bool, str]:
    """Entities matching ``conditions`` (through ``filter_index``), on ``aliases`` only.

    Returns (entities, whether more follow, the index used). ``offset`` counts matching entities
    on those shards. Errors of the query (no index, not ready, bad value) raise.
    """
    Entity = _entity_model()
    query = Entity.objects.filter_index(**conditions)
    index_name = query.index.name
    if set(aliases) == set(shards.shard_aliases()):
        found = list(query[offset : offset + size + 1])
        return found[:size], len(found) > size, index_name
    wanted = set(aliases)
    kept = list(islice(_on_shards(query, wanted), offset, offset + size + 1))
    return kept[:size], len(kept) > size, index_name


def _on_shards(query: Any, wanted: set[str], chunk: int = 200) -> Iterator[Any]:
    # Sliced chunks keep the limit pushed down: the query reads no further than the page needs.
    start = 0
    while True:
        batch = list(query[start : start + chunk])
        yield from (e for e in batch if e.shard in wanted)
        if len(batch) < chunk:
            return
        start += chunk

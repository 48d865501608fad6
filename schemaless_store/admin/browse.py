"""Browsing entities for the admin: pages across shards, newest first.

Pages are *keyset* pages: each shard is read with ``ORDER BY updated DESC, added_id DESC LIMIT
n + 1`` after the last row shown (the ``updated`` key serves it), the shards' rows are merged, and
the extra row says whether there is a next page. No page ever counts or skips rows, so the last
page of a billion entities costs what the first does. The position of a row in the merged order is
``(updated, shard position, added_id)``; a :class:`Cursor` carries it in the URL.
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError
from django.db.models import Q

from ..exceptions import SchemalessError
from ..models.entity import Entity
from ..topology import shards

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


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

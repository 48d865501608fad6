"""The change feed: every cell appended on a shard, in ``added_at`` order, from a position.

``changes(shard, after=position, limit=...)`` returns the cells appended after ``position`` and
the position to ask from next time, so a consumer (cache invalidation, search indexing) that
stores the position resumes exactly: no change is returned twice, none is skipped. With
``SCHEMALESS["HISTORY"]`` on, every entity write appends an ``_entity`` cell, so the feed carries
entity changes too (a deletion is a cell without a body).

Why there is a grace period: ``added_at`` is given out when a transaction *inserts* a cell, but
transactions commit in any order, so a reader may see cell 11 while cell 10 is still uncommitted.
Reading past 10 then would skip it forever. So the feed stops before a hole in the sequence
until the cell after the hole is ``SCHEMALESS["FEED_GAP_GRACE"]`` seconds old; after that the
hole is taken as permanent (a rolled-back insert, or a value InnoDB's auto-increment skipped).
The guarantee: a cell whose transaction commits within the grace period of its insert is never
skipped. The store's own cell writes are short transactions; a caller that holds
``transaction.atomic()`` open around entity writes longer than the grace period must raise it.
The feed assumes the server's ``auto_increment_increment`` is 1 (the default).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from ..config import conf
from ..exceptions import CorruptBody, InvalidQuery
from ..sql.values import datetime_converter
from ..tables import cells as cell_table
from ..topology import shards
from ..values import bounds
from ..values.codec import decode_body

MAX_LIMIT = 10_000


@dataclass(frozen=True)
class Change:
    """One appended cell, as the feed reports it."""

    shard: str
    position: int  # the cell's added_at: resume after it
    row_key: uuid.UUID
    column_name: str
    ref_key: int
    created_at: dt.datetime
    body_bytes: bytes | None

    @property
    def is_entity(self) -> bool:
        """True for an entity's version (``SCHEMALESS["HISTORY"]``); ``row_key`` is its id."""
        return self.column_name == cell_table.ENTITY_COLUMN

    @property
    def deleted(self) -> bool:
        """True for an entity's deletion (a cell without a body)."""
        return self.body_bytes is None

    @property
    def body(self) -> dict[str, Any] | None:
        if self.body_bytes is None:
            return None
        try:
            return decode_body(self.body_bytes)
        except CorruptBody as exc:
            raise CorruptBody(
                f"cell {self.row_key}/{self.column_name}@{self.ref_key} on {self.shard}: {exc}"
            ) from None


@dataclass(frozen=True)
class ChangePage:
    """What :func:`changes` returns: the changes, and where the next call starts."""

    shard: str
    changes: list[Change]
    position: int  # pass as ``after`` next time

    def __iter__(self) -> Any:
        return iter(self.changes)

    def __len__(self) -> int:
        return len(self.changes)


def changes(shard: str, after: int = 0, limit: int = 100) -> ChangePage:
    """The cells appended on ``shard`` after position ``after`` (at most ``limit``), in order."""
    shards.check_alias(shard)
    if not bounds.whole(after, 0):
        raise InvalidQuery(f"after is a feed position (an int >= 0), not {after!r}")
    if not bounds.whole(limit, 1, MAX_LIMIT):
        raise InvalidQuery(f"limit is an int from 1 to {MAX_LIMIT}, not {limit!r}")
    rows = cell_table.appended_after(shard, after, limit, with_moved=True)
    convert = datetime_converter(shards.connection(shard))
    settled = timezone.now() - dt.timedelta(seconds=conf.get().feed_gap_grace)
    found: list[Change] = []
    position = after
    for added_at, row_key, column_name, ref_key, body, created, moved in rows:
        created = convert(created)
        if added_at != position + 1 and created > settled and not moved:
            break  # a hole that an open transaction may still fill: wait for it
        if moved:  # a bucket move's copy: the change is in the feed of the shard it came from
            position = added_at
            continue
        found.append(
            Change(
                shard=shard,
                position=added_at,
                row_key=uuid.UUID(bytes=bytes(row_key)),
                column_name=column_name,
                ref_key=ref_key,
                created_at=created,
                body_bytes=None if body is None else bytes(body),
            )
        )
        position = added_at
    return ChangePage(shard=shard, changes=found, position=position)


def head(shard: str) -> int:
    """The highest position on ``shard`` now (start a consumer here to skip the past)."""
    shards.check_alias(shard)
    return cell_table.last_position(shard)

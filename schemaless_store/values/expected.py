"""What a conditional write expects the stored row to be: the entity as its instance read it.

``save(if_unchanged=True)`` (and ``delete``, ``Entity.objects.modify()``, the admin's edit
form) hands the write protocol an :class:`Expected`; step 1 compares it with the row it reads
under ``SELECT ... FOR UPDATE`` anyway, so the check costs no extra round trip and no write can
slip in between the check and the write (:mod:`..writes.protocol`).

The store keeps no version counter. What it compares is what step 1 already reads: the body
(the exact bytes the instance was read with, or last wrote) and, when the instance knows them,
whether the row is the one it read: the same ``added_id`` (a write in place keeps it; an entity
deleted and created again gets a new one) or the same ``updated`` time (a bucket move gives the
row the target's own ``added_id`` but keeps its ``updated``: a move alone is no change; a
re-creation changes both). A write that stored the very same body in between does not count as
a change: the save is then based on what is stored now, so no write is lost (docs/usage.md,
"Saving only if unchanged").
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Any, Protocol


class Found(Protocol):
    """The row step 1 read and locked (:class:`~..tables.entities.Locked`), as far as the
    comparison needs it."""

    @property
    def added_id(self) -> int: ...

    @property
    def body(self) -> bytes | None: ...

    @property
    def updated(self) -> Any: ...


@dataclass(frozen=True)
class Expected:
    """The stored row a conditional write expects: ``exists`` False for "no row";
    ``body`` (bytes) or ``token`` (:func:`token` of the row) to compare; ``added_id`` and
    ``updated`` (:func:`instant`) if known."""

    exists: bool
    body: bytes | None = None
    token: str | None = None
    added_id: int | None = None
    updated: str | None = None

    def matches(self, found: Found | None) -> bool:
        if found is None or found.body is None:
            return not self.exists
        if not self.exists:
            return False
        if self.token is not None:
            return _token_matches(self.token, found)
        if found.body != self.body:
            return False
        if self.added_id is None or found.added_id == self.added_id:
            return True
        return self.updated is not None and instant(found.updated) == self.updated


def landed(found: Found | None, body: bytes) -> bool:
    """Whether ``found`` is what this write (``body``; empty for a deletion) leaves: after a
    lost commit answer, the retry finds the first try's own write, which is no conflict."""
    if found is None or found.body is None:
        return not body
    return found.body == body


def instant(value: Any) -> str | None:
    """A row's ``updated`` as one text, whether read as text (``CAST(updated AS CHAR)``,
    SQLite's) or held by an instance (a datetime, aware under ``USE_TZ``): UTC, to the
    microsecond."""
    if value is None:
        return None
    moment = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return str(moment.isoformat(sep=" ", timespec="microseconds"))


def token(body: bytes, added_id: int | None, updated: Any = None) -> str:
    """A short text that stands for one stored state of an entity (a form's hidden field):
    ``<body digest>.<updated digest>.<added_id>``, compared as :meth:`Expected.matches`
    compares a row (the body, and the same ``added_id`` or the same ``updated``)."""
    return f"{_digest(body)}.{_digest(instant(updated))}.{added_id}"


def _digest(value: bytes | str | None) -> str:
    if value is None:
        return ""
    data = value.encode() if isinstance(value, str) else value
    return hashlib.blake2b(data, digest_size=16, person=b"schemaless-ver").hexdigest()


def _token_matches(text: str, found: Found) -> bool:
    assert found.body is not None
    parts = text.split(".")
    if len(parts) != 3:  # a page loaded before tokens named ``updated``: body and added_id
        digest = hashlib.blake2b(found.body, digest_size=16, person=b"schemaless-ver")
        digest.update(str(found.added_id).encode())
        return digest.hexdigest() == text
    body, updated, added_id = parts
    if _digest(found.body) != body:
        return False
    return added_id == str(found.added_id) or (
        updated != "" and updated == _digest(instant(found.updated))
    )


def of(entity: Any) -> Expected:
    """What ``entity`` was read as (or last written as): no row, for an instance never read."""
    if entity._state.adding or entity.row_body is None:
        return Expected(exists=False)
    return Expected(
        exists=True,
        body=bytes(entity.row_body),
        added_id=entity.added_id,
        updated=instant(getattr(entity, "row_updated", None)),
    )

"""What a conditional write expects the stored row to be: the entity as its instance read it.

``save(if_unchanged=True)`` (and ``delete``, ``Entity.objects.modify()``, the admin's edit
form) hands the write protocol an :class:`Expected`; step 1 compares it with the row it reads
under ``SELECT ... FOR UPDATE`` anyway, so the check costs no extra round trip and no write can
slip in between the check and the write (:mod:`.writes.protocol`).

The store keeps no version counter. What it compares is what step 1 already reads: the body
(the exact bytes the instance was read with, or last wrote) and, when the instance knows it,
the row's ``added_id`` (an entity deleted and created again gets a new one). A write that stored
the very same body in between does not count as a change: the save is then based on what is
stored now, so no write is lost (docs/usage.md, "Saving only if unchanged").
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol


class Found(Protocol):
    """The row step 1 read and locked (:class:`~.tables.entities.Locked`), as far as the
    comparison needs it."""

    @property
    def added_id(self) -> int: ...

    @property
    def body(self) -> bytes | None: ...


@dataclass(frozen=True)
class Expected:
    """The stored row a conditional write expects: ``exists`` False for "no row";
    ``body`` (bytes) or ``token`` (:func:`token` of the body) to compare; ``added_id`` if
    known."""

    exists: bool
    body: bytes | None = None
    token: str | None = None
    added_id: int | None = None

    def matches(self, found: Found | None) -> bool:
        if found is None or found.body is None:
            return not self.exists
        if not self.exists:
            return False
        if self.added_id is not None and found.added_id != self.added_id:
            return False
        if self.token is not None:
            return token(found.body, found.added_id) == self.token
        return found.body == self.body


def landed(found: Found | None, body: bytes) -> bool:
    """Whether ``found`` is what this write (``body``; empty for a deletion) leaves: after a
    lost commit answer, the retry finds the first try's own write, which is no conflict."""
    if found is None or found.body is None:
        return not body
    return found.body == body


def token(body: bytes, added_id: int | None) -> str:
    """A short text that stands for one stored state of an entity (a form's hidden field)."""
    digest = hashlib.blake2b(body, digest_size=16, person=b"schemaless-ver")
    digest.update(str(added_id).encode())
    return digest.hexdigest()


def of(entity: Any) -> Expected:
    """What ``entity`` was read as (or last written as): no row, for an instance never read."""
    if entity._state.adding or entity.row_body is None:
        return Expected(exists=False)
    return Expected(exists=True, body=bytes(entity.row_body), added_id=entity.added_id)

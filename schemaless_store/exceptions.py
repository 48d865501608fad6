"""Every error the store raises on purpose derives from :class:`SchemalessError`.

Each class also derives from the built-in exception a caller would naturally catch (``ValueError``
for bad input, ``TypeError`` for unsupported types), so generic handlers keep working.
"""

from __future__ import annotations

import uuid


class SchemalessError(Exception):
    """Base class of every error raised by schemaless_store."""


class ConfigurationError(SchemalessError):
    """The ``SCHEMALESS`` settings or an index declaration are invalid."""


class InvalidEntityError(SchemalessError, TypeError):
    """What was given as an entity is not a property bag (a dict with string keys)."""


class InvalidEntityId(SchemalessError, ValueError):
    """An entity id is not a ``uuid.UUID``, 16 raw bytes, or 32 hex characters."""


class UnsupportedValue(SchemalessError, TypeError):
    """A property value cannot be stored so that it reads back exactly (a set, an object, ...)."""


class BodyTooLarge(SchemalessError, ValueError):
    """The encoded entity body is larger than ``SCHEMALESS["MAX_BODY_BYTES"]``."""


class CorruptBody(SchemalessError, ValueError):
    """A body read from the database cannot be decoded (truncated, foreign or tampered)."""


class IndexValueError(SchemalessError, ValueError):
    """A value of an indexed property does not fit its index column (wrong type, NaN, ...)."""


class IndexValueTooLong(IndexValueError):
    """A value of an indexed property is longer than its index column; it is never truncated."""


class EntityExists(SchemalessError):
    """``create()`` was given the id of an entity that already exists."""


class UniqueViolation(SchemalessError, ValueError):
    """A unique index already holds this value for another entity; nothing was written."""

    def __init__(self, message: str, index: str = "", values: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.index = index
        self.values = values


class InvalidQuery(SchemalessError, ValueError):
    """A query is malformed: unknown lookup, bad value for a lookup, bad ordering or slice."""


class NoIndexForQuery(InvalidQuery, LookupError):
    """No declared index can serve the query without missing matches: its message names the
    conditions, why each close declared index was rejected, and what would serve it."""


class InvalidCursor(InvalidQuery):
    """A pagination cursor is malformed, tampered with, or belongs to another query."""


class IndexNotReady(SchemalessError):
    """The index that covers a query is still being built by the cleaner."""


class ShardUnavailable(SchemalessError, ConnectionError):
    """A shard could not be reached within the configured timeouts; ``alias`` names it.
    ``lost``: an open connection was lost (killed by a move's fence, or its server failed),
    rather than a new one refused: a fresh connection may well succeed."""

    def __init__(self, alias: str, message: str, *, lost: bool = False) -> None:
        super().__init__(f"shard {alias!r} is unavailable: {message}")
        self.alias = alias
        self.lost = lost


class OutcomeUnknown(ShardUnavailable):
    """A write's commit was sent and its answer lost, and the shard stayed unreachable while
    the store asked it for the write's receipt, or no receipt was found but it may have been
    removed: its time is at or below the shard's pruned line, or it would be near
    ``RECEIPT_RETENTION`` old by the shard's clock (docs/design.md#receipts): the write may
    have landed or not, and the store does not guess. ``write_id``: the write's id (hex),
    which the shard's ``schemaless_receipts`` table holds if it landed.

    A subclass of :class:`ShardUnavailable`, so existing handlers still catch it; a caller
    that must not apply a write twice catches it first and reads the entity again before
    deciding. A connection refused before anything was sent is a plain
    :class:`ShardUnavailable` (the write did not happen)."""

    def __init__(self, alias: str, write_id: str, message: str) -> None:
        super().__init__(alias, f"the outcome of write {write_id} is unknown: {message}", lost=True)
        self.write_id = write_id


class BulkWriteNotSupported(SchemalessError, NotImplementedError):
    """A Django bulk API that would bypass index maintenance was called."""


class CellImmutable(SchemalessError, ValueError):
    """A stored cell was asked to change: another body for an existing
    ``(row_key, column_name, ref_key)``, or an update or delete of a cell."""


class InvalidCell(SchemalessError, ValueError):
    """A cell's row key, column name, version or body is not acceptable."""


class NotOwner(SchemalessError):
    """A shard refused a write for buckets it does not own now (a bucket move flipped them to
    another shard, or is flipping them). The store retries such a write on the owner itself;
    this reaches a caller only from inside its own ``transaction.atomic()`` on that shard,
    whose transaction only the caller can retry (docs/resharding.md)."""

    def __init__(self, alias: str, buckets: set[int] | frozenset[int]) -> None:
        shown = ", ".join(str(b) for b in sorted(buckets)[:10])
        more = f" and {len(buckets) - 10} more" if len(buckets) > 10 else ""
        super().__init__(
            f"shard {alias!r} does not own bucket(s) {shown}{more} now: they moved or are "
            "moving to another shard; retry the transaction"
        )
        self.alias = alias
        self.buckets = frozenset(buckets)


class MoveRefused(SchemalessError, ValueError):
    """``movebuckets`` was asked for a move it cannot make (unknown shard, buckets out of range
    or owned by the target already, a target not migrated, another move under way); nothing
    was changed."""


class PlacementError(SchemalessError, ValueError):
    """An entity cannot be placed with the property asked (``placed_with``): no index is
    sharded on it, the entity lacks it or holds a list, or the indexes sharded on it disagree
    about its bucket (docs/placement.md). Nothing was written."""


class Conflict(SchemalessError):
    """A conditional write (``save(if_unchanged=True)``, ``delete(if_unchanged=True)``,
    ``Entity.objects.modify()``) found the stored entity changed, deleted or created since the
    instance was read. Nothing was written. ``ids``: the entities whose rows differed (a batch
    may name several)."""

    def __init__(self, ids: list[uuid.UUID], message: str | None = None) -> None:
        shown = ", ".join(str(i) for i in ids[:5])
        more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
        super().__init__(
            message or f"entity {shown}{more} changed since it was read; read it again and retry"
        )
        self.ids = list(ids)

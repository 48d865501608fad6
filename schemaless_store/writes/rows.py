"""What an entity (or a cell version) implies: its encoded body, and the index rows of every
maintained index. Computed, and validated, before anything is written."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from ..config import conf
from ..config.indexes import ENTITIES, Index, Source
from ..exceptions import BodyTooLarge, CorruptBody, IndexValueError, InvalidEntityError
from ..tables import lifecycle
from ..tables.lifecycle import maintained_indexes
from ..values.codec import decode_body

logger = logging.getLogger("schemaless_store.writes")

# (index, column values)
RowSet = set[tuple[Index, tuple[Any, ...]]]


def encode_body(properties: Mapping[str, Any], key: bytes | None = None) -> bytes:
    """The stored body of a property bag; raises on a bad name, value or size (``key``: the
    entity's id, for the message; None for a cell)."""
    for name in properties:
        if not isinstance(name, str):
            raise InvalidEntityError(f"property names are strings, not {type(name).__name__}")
    settings = conf.get()
    body = settings.codec.encode(properties)
    if len(body) > settings.max_body_bytes:
        what = "cell" if key is None else f"entity {uuid.UUID(bytes=key)}"
        raise BodyTooLarge(
            f"{what}: body is {len(body)} bytes once encoded; "
            f"the limit (SCHEMALESS['MAX_BODY_BYTES']) is {settings.max_body_bytes}"
        )
    return body


def rows_of(
    properties: Mapping[str, Any], *, strict: bool = True, column: str | None = None
) -> RowSet:
    """Every (index, row) an entity's properties imply, over the maintained indexes (with
    ``column``: the indexes over that cell column, for a version of it).

    With ``strict=False`` (reading old state), an index whose values no longer fit is skipped:
    its rows, if any, are the cleaner's to sweep. Even when strict, an index still ``building``
    is skipped (with a warning) rather than failing the write: it serves no query yet, and its
    backfill reports the entity as not indexed.
    """
    rows: RowSet = set()
    for index in maintained_indexes():
        if index.column != column:
            continue
        try:
            rows.update((index, row) for row in index.rows_for(properties))
        except IndexValueError as exc:
            if not strict:
                continue
            if lifecycle.state_of(index) != lifecycle.BUILDING:
                raise
            logger.warning(
                "index %s is still building and cannot index this entity (%s); the write goes "
                "on without its row",
                index.name,
                exc,
            )
    return rows


def stored_rows(key: bytes, body: bytes | None, source: Source = ENTITIES) -> RowSet:
    """The rows a stored body implies (none for a missing or undecodable one)."""
    return rows_stored(stored_properties(key, body, source), source)


def stored_properties(
    key: bytes, body: bytes | None, source: Source = ENTITIES
) -> dict[str, Any] | None:
    """A stored body's properties; None for a missing or undecodable one (said in the log:
    its old index rows are left to the cleaner)."""
    if body is None:
        return None
    try:
        return decode_body(bytes(body))
    except CorruptBody:
        logger.warning(
            "%s %s has an undecodable body; its old index rows are left to the cleaner",
            source.noun,
            key.hex(),
        )
        return None


def rows_stored(properties: Mapping[str, Any] | None, source: Source = ENTITIES) -> RowSet:
    """The rows that stored ``properties`` (from :func:`stored_properties`) imply."""
    if properties is None:
        return set()
    return rows_of(properties, strict=False, column=source.column)

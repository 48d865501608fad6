"""Page cursors: the sort key of a page's last row, signed and bound to its query.

A cursor is ``django.core.signing`` over MessagePack (index keys are bytes, which JSON cannot
carry) of ``[fingerprint of the query, key]``. A tampered cursor, one of another query, or one
of the wrong shape raises :class:`InvalidCursor`.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from typing import Any

import msgpack
from django.core import signing

from ..exceptions import InvalidCursor

CURSOR_SALT = "schemaless_store.query.cursor"
# What index column values are (index_values.ColumnType.to_db): a cursor's key holds nothing else.
_CURSOR_TYPES = frozenset((bytes, int, float))


class CursorSerializer:
    """Cursors carry bytes (index keys), which JSON cannot: MessagePack instead."""

    def dumps(self, obj: Any) -> bytes:
        return msgpack.packb(obj, use_bin_type=True)

    def loads(self, data: bytes) -> Any:
        try:
            return msgpack.unpackb(data, raw=False)
        except Exception as exc:  # msgpack raises several types for damaged input
            raise ValueError(str(exc)) from exc


def fingerprint(*parts: Any) -> str:
    """A short digest of what makes a query the same query (index, order, conditions)."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def encode(query_fingerprint: str, key: Sequence[Any]) -> str:
    return signing.dumps(
        [query_fingerprint, list(key)],
        salt=CURSOR_SALT,
        serializer=CursorSerializer,
        compress=True,
    )


def decode(cursor: Any, query_fingerprint: str, width: int) -> tuple[Any, ...]:
    """The key of a cursor of this query, whose sort keys have ``width`` columns (the entity
    id last)."""
    if not isinstance(cursor, str):
        raise InvalidCursor(f"a cursor is a string, not {type(cursor).__name__}")
    try:
        payload = signing.loads(cursor, salt=CURSOR_SALT, serializer=CursorSerializer)
    except (signing.BadSignature, ValueError, TypeError, zlib.error) as exc:
        raise InvalidCursor("the cursor is invalid or was tampered with") from exc
    if not (isinstance(payload, list) and len(payload) == 2 and isinstance(payload[1], list)):
        raise InvalidCursor("the cursor is invalid or was tampered with")
    found, key = payload
    if found != query_fingerprint:
        raise InvalidCursor("the cursor belongs to another query")
    # Signed, so written by this store; still, a key of the wrong shape (an old release, a
    # leaked secret) is refused here rather than failing in the driver.
    if not (
        len(key) == width
        and all(type(v) in _CURSOR_TYPES for v in key)
        and all(-(2**63) <= v < 2**63 for v in key if type(v) is int)
        and all(v == v for v in key if type(v) is float)  # no NaN
        and type(key[-1]) is bytes
        and len(key[-1]) == 16
    ):
        raise InvalidCursor("the cursor is invalid or was tampered with")
    return tuple(key)

"""Entity ids: 16 bytes, given as a ``uuid.UUID``, the raw bytes or 32 hex characters; the
time-ordered ids the store generates; and the layout of a *placed* id, an id that carries the
bucket it lives in (docs/placement.md).

Nothing here knows about Django or SQL.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from typing import Any

from ..exceptions import InvalidEntityId

_HEX32 = re.compile(r"[0-9a-fA-F]{32}")
_DASHED = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def entity_id_bytes(value: Any) -> bytes:
    """The 16 bytes of an entity id given as a ``uuid.UUID``, 16 raw bytes or 32 hex characters."""
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if len(raw) != 16:
            raise InvalidEntityId(f"an entity id in bytes must be 16 bytes long, not {len(raw)}")
        return raw
    if isinstance(value, str):
        text = value.strip()
        if _HEX32.fullmatch(text) or _DASHED.fullmatch(text):
            return uuid.UUID(text).bytes
        raise InvalidEntityId(f"{value!r} is not an entity id (expected 32 hex characters)")
    raise InvalidEntityId(
        f"an entity id must be a uuid.UUID, 16 bytes or 32 hex characters, "
        f"not {type(value).__name__}"
    )


# --- generated ids: time-ordered, like UUIDv7 (RFC 9562) ----------------------------------
#
#   bytes 0-5   unix time in ms (big-endian)
#   byte 6      0x7_: UUID version 7 (high nibble), then 4 random bits
#   byte 8      the RFC 9562 variant (10), then 6 random bits
#   the rest    random (74 random bits in all)
#
# On MariaDB ``entities`` is clustered by ``id`` (docs/design.md#the-entities-table): ids that
# grow with time are appended at the right edge of each shard's B-tree, where random ones
# (uuid4) would split pages all over it. Routing is unchanged: a generated id is not a placed
# id (its version nibble is 7, never the placed mark's 8), so its bucket is its stable hash.


def new_id() -> bytes:
    """The 16 bytes of a fresh id the store generates for an entity given none."""
    return _new_id(time.time_ns() // 1_000_000, os.urandom(10))


def _new_id(millis: int, random_bytes: bytes) -> bytes:
    raw = bytearray((millis & 0xFFFF_FFFF_FFFF).to_bytes(6, "big") + random_bytes)
    raw[6] = 0x70 | (raw[6] & 0x0F)
    raw[8] = 0x80 | (raw[8] & 0x3F)
    return bytes(raw)


# --- placed ids: an id that carries its bucket (co-located entities, docs/placement.md) ------
#
#   bytes 0-5   unix time in ms (big-endian): placed ids sort by creation, like UUIDv7
#   byte 6      0x85: UUID version 8 (high nibble), then 0x5   } 18 bits that mark a placed id
#   byte 7      0xC1                                           }
#   byte 8      0xAC: the RFC 9562 variant (10), then 0b101100 }
#   bytes 9-10  the bucket (big-endian), < 65536
#   bytes 11-15 random
#
# Routing by id stays a pure function of the id: a placed id's bucket is written in it, every
# other id's is its hash. A uuid4 (version 4) or a generated id (version 7) is never taken for a
# placed id.

PLACED_MARK = b"\x85\xc1\xac"
PLACED_MAX_BUCKETS = 1 << 16


def placed_bucket(data: bytes) -> int | None:
    """The bucket written in a placed id (16 bytes with the mark), else None."""
    if len(data) == 16 and data[6:9] == PLACED_MARK:
        return (data[9] << 8) | data[10]
    return None


def make_placed_id(bucket: int, millis: int, random_bytes: bytes) -> bytes:
    """The 16 bytes of a placed id for ``bucket`` (see the layout above)."""
    if not 0 <= bucket < PLACED_MAX_BUCKETS:
        raise ValueError(f"a placed id holds a bucket below {PLACED_MAX_BUCKETS}, not {bucket}")
    if len(random_bytes) != 5:
        raise ValueError("a placed id takes 5 random bytes")
    return (
        (millis & 0xFFFF_FFFF_FFFF).to_bytes(6, "big")
        + PLACED_MARK
        + bucket.to_bytes(2, "big")
        + random_bytes
    )

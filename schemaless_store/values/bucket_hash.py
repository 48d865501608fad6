"""The bucket that owns a key: the bucket a placed id carries (:mod:`.entity_ids`), else the
key's stable hash, the same in every process and on every machine.

Nothing here knows about Django or SQL.
"""

from __future__ import annotations

import hashlib

from .entity_ids import PLACED_MARK


def stable_hash(data: bytes) -> int:
    """A 64-bit blake2b hash: the same in every process and on every machine.

    (Python's builtin hash is salted per process, so it never routes anything here.)
    """
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def bucket_of(data: bytes, buckets: int) -> int:
    """The logical bucket (0 .. buckets-1) that owns a key, given as its canonical bytes: the
    bucket a placed id carries, else the key's stable hash."""
    if len(data) == 16 and data[6:9] == PLACED_MARK:
        return ((data[9] << 8) | data[10]) % buckets
    return stable_hash(data) % buckets


def buckets_of(keys: list[bytes], buckets: int) -> list[int]:
    """:func:`bucket_of` of each key, in one loop (a bucket move routes every row it reads)."""
    blake2b, from_bytes, mark = hashlib.blake2b, int.from_bytes, PLACED_MARK
    return [
        ((key[9] << 8) | key[10]) % buckets
        if len(key) == 16 and key[6:9] == mark
        else from_bytes(blake2b(key, digest_size=8).digest(), "big") % buckets
        for key in keys
    ]

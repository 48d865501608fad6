"""The data set: entity ``i`` is the same property bag in the store and in the peer's table.

Entities are generated from their number alone, in Python for the store (``bulk_put``) and in
SQL for the peer (``INSERT ... SELECT`` over MariaDB's sequence engine), so both sides hold the
same rows without shipping a million JSON documents through the client. :func:`check_same` proves
it on samples.

The store grows in stages (10k, then 100k, then 1M entities). Each stage brings its own users,
about :data:`PER_USER` entities each, interleaved in insertion order the way posts of many users
interleave in time, so a queried user has ~100 entities at every size.

With ``BENCH_PLACED=1`` (``bench.run --placed``) the store's entities are placed with their
``user_id`` (docs/placement.md): entity ``i``'s id is a placed id in its user's bucket, made from
``i`` alone, so every run and process agrees on it. The peer keeps ``UNHEX(MD5(i))`` ids
(:func:`peer_id`): it has no buckets.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

PER_USER = 100
# A prime above any user count: ``i * MIX mod users`` visits every user once per ``users`` rows.
MIX = 1_000_003
PUBLISHED_0 = 1_600_000_000
LOREM = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua."
)
# Users created by the write legs (puts, the live writer) are numbered from here, far from the
# data set's users, so the queried users keep their ~100 entities.
WRITER_USERS_0 = 10**9
WRITER_USERS = 1000


def placed() -> bool:
    """Whether this run places the store's entities (read when asked: ``bench.run`` sets it)."""
    return os.environ.get("BENCH_PLACED") == "1"


_STAGES: list[Stage] = []  # every stage :func:`stages` made: entity i's user, for a placed id


def peer_id(i: int) -> bytes:
    """Entity ``i``'s id in the peer's table: ``UNHEX(MD5(i))``."""
    return hashlib.md5(str(i).encode()).digest()


def entity_id(i: int) -> bytes:
    """Entity ``i``'s id in the store: :func:`peer_id`, or with ``BENCH_PLACED`` a placed id
    in the bucket of its user (time part ``i``, random part from the MD5)."""
    if not placed():
        return peer_id(i)
    from schemaless_store.values import entity_ids

    stage = next(s for s in _STAGES if s.lo <= i < s.hi)
    return entity_ids.make_placed_id(_user_bucket(stage.user_of(i)), i, peer_id(i)[:5])


@functools.lru_cache(maxsize=200_000)
def _user_bucket(user: int) -> int:
    from schemaless_store.topology.placement import bucket_of_value

    return bucket_of_value("user_id", user)


@dataclass(frozen=True)
class Stage:
    """Entities ``lo`` .. ``hi - 1``, spread over their own users."""

    lo: int
    hi: int

    @property
    def first_user(self) -> int:
        return self.lo // PER_USER

    @property
    def users(self) -> int:
        return max(1, (self.hi - self.lo) // PER_USER)

    def user_of(self, i: int) -> int:
        return self.first_user + (i * MIX) % self.users

    def properties(self, i: int) -> dict[str, Any]:
        user = self.user_of(i)
        return {
            "id": entity_id(i),
            "user_id": user,
            "published": PUBLISHED_0 + 7 * i,
            "title": f"Post number {i}",
            "link": f"https://example.com/{user}/{i}",
            "text": f"{LOREM} {i}",
        }

    def chunks(self, size: int) -> Iterator[list[dict[str, Any]]]:
        """The stage's property bags, ``size`` at a time (memory stays flat at any scale)."""
        for start in range(self.lo, self.hi, size):
            yield [self.properties(i) for i in range(start, min(self.hi, start + size))]

    def sql_select(self, lo: int, hi: int) -> str:
        """``SELECT id, updated, body`` of entities ``lo`` .. ``hi - 1`` (within the stage),
        as MariaDB computes them: the same values as :meth:`properties`."""
        user = f"({self.first_user} + ((seq * {MIX}) MOD {self.users}))"
        return (
            "SELECT UNHEX(MD5(seq)), UTC_TIMESTAMP(6), JSON_OBJECT("
            f"'user_id', {user}, "
            f"'published', {PUBLISHED_0} + 7 * seq, "
            "'title', CONCAT('Post number ', seq), "
            f"'link', CONCAT('https://example.com/', {user}, '/', seq), "
            f"'text', CONCAT('{LOREM} ', seq)) "
            f"FROM seq_{lo}_to_{hi - 1}"
        )


def stages(sizes: list[int]) -> list[Stage]:
    """Consecutive stages that bring the store to each size in turn."""
    out, lo = [], 0
    for size in sorted(sizes):
        if size > lo:
            out.append(Stage(lo, size))
            lo = size
    _STAGES[:] = out
    return out


def writer_properties(n: int, tag: str) -> dict[str, Any]:
    """A new entity for the write legs (random id, given by the store or the raw writer)."""
    user = WRITER_USERS_0 + n % WRITER_USERS
    return {
        "user_id": user,
        "published": PUBLISHED_0 + 7 * 10**8 + n,
        "title": f"{tag} {n}",
        "link": f"https://example.com/{tag}/{n}",
        "text": f"{LOREM} {n}",
    }

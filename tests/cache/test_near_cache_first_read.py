"""The near cache's copy of a miss (docs/cache.md#a-copy-from-the-first-read): a reader that
set the id's token itself keeps its copy through one push (its own token's), never two, and
never through this process's eviction. The pushes are fed to the near cache's bookkeeping by
hand (a real tracking connection to a real Redis, on a prefix no key has), so every order of
mark, push and copy is played exactly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from schemaless_store.cache import near_cache
from tests.support import STORE
from tests.support.near import standalone

pytestmark = STORE

PREFIX = "firstread:"
H = "ab" * 16


@pytest.fixture
def near() -> Iterator[near_cache.NearCache]:
    with standalone(PREFIX, max_entries=10, drop_timeout=2.0, entry_timeout=60) as built:
        yield built


def push(near: near_cache.NearCache, h: str = H) -> None:
    """A message from Redis naming the id's token key, as the tracking thread applies it."""
    near._pushed([(PREFIX + h).encode()])


def copy(near: near_cache.NearCache, created: bool, pushes: int = 0, evict: bool = False) -> None:
    mark, found = near.get_many([H])
    assert mark is not None and found == {}
    for _ in range(pushes):
        push(near)
    if evict:
        near.evict([H])
    near.put(mark, {H: (5, "row")}, created={H} if created else ())


def test_a_miss_copied_before_its_own_push_keeps_it_through_that_push_only(near):
    copy(near, created=True)
    assert near.holds(H)
    push(near)  # its own token's push, come late: passed over
    assert near.holds(H)
    push(near)  # any later one: a write's
    assert not near.holds(H)


def test_a_miss_copied_after_one_push_is_dropped_by_the_next(near):
    copy(near, created=True, pushes=1)
    assert near.holds(H)
    push(near)
    assert not near.holds(H)


def test_a_miss_seeing_two_pushes_is_refused(near):
    refused = near.stats.refused
    copy(near, created=True, pushes=2)
    assert not near.holds(H) and near.stats.refused == refused + 1


def test_a_hit_allows_no_push(near):
    copy(near, created=False, pushes=1)
    assert not near.holds(H)
    copy(near, created=False)
    assert near.holds(H)
    push(near)
    assert not near.holds(H)


def test_this_process_eviction_refuses_a_miss_and_passes_over_nothing(near):
    copy(near, created=True, evict=True)
    assert not near.holds(H)
    copy(near, created=True)
    near.evict([H])  # this process's write returned: its copy goes, expected push or not
    assert not near.holds(H)


def test_another_id_s_pushes_do_not_count(near):
    mark, _ = near.get_many([H])
    assert mark is not None
    push(near, "cd" * 16)
    push(near, "cd" * 16)
    near.put(mark, {H: (5, "row")}, created={H})
    assert near.holds(H)

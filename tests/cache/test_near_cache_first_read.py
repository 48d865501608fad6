"""The near cache's copies (docs/cache.md#no-copy-from-a-first-read): a copy allows no push of
its id after its read's mark, and this process's eviction drops it. The pushes are fed to the
near cache's bookkeeping by hand (a real tracking connection to a real Redis, on a prefix no
key has), so every order of mark, push and copy is played exactly."""

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


def copy(near: near_cache.NearCache, pushes: int = 0, evict: bool = False) -> None:
    mark, found = near.get_many([H])
    assert mark is not None and found == {}
    for _ in range(pushes):
        push(near)
    if evict:
        near.evict([H])
    near.put(mark, {H: (5, "row")})


def test_a_copy_that_would_allow_its_own_push_is_refused_outright(near):
    """A miss's copy once kept through one push (its own token's); Redis names a key once per
    turn, so that push could also be another write's DEL (test_near_first_read_race.py)."""
    mark, _ = near.get_many([H])
    with pytest.raises(ValueError, match="allows no push"):
        near.put(mark, {H: (5, "row")}, created={H})
    assert not near.holds(H)


def test_a_hit_allows_no_push(near):
    copy(near, pushes=1)
    assert not near.holds(H)
    copy(near)
    assert near.holds(H)
    push(near)
    assert not near.holds(H)


def test_this_process_eviction_refuses_a_copy(near):
    copy(near, evict=True)
    assert not near.holds(H)
    copy(near)
    near.evict([H])  # this process's write returned: its copy goes
    assert not near.holds(H)


def test_another_id_s_pushes_do_not_count(near):
    mark, _ = near.get_many([H])
    assert mark is not None
    push(near, "cd" * 16)
    push(near, "cd" * 16)
    near.put(mark, {H: (5, "row")})
    assert near.holds(H)

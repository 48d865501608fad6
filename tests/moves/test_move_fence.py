"""A move's fence (issue 34, items 11 and 12; docs/design.md#the-fence): one round of ending
sessions per source and move, a resumed mover's included.
"""

from __future__ import annotations

import pytest

from schemaless_store.metadata import BucketMove
from schemaless_store.moves.mover import Mover
from schemaless_store.topology import fence
from tests.support import STORE
from tests.support.moving import MOVED, assert_moved_and_exact, populate, run, source_and_target

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def counted_fences(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = fence.withdraw

    def withdraw(alias, buckets, state, *, end_connections=False):
        calls.append(alias)
        return real(alias, buckets, state, end_connections=end_connections)

    monkeypatch.setattr(fence, "withdraw", withdraw)
    return calls


def test_a_move_fences_each_source_once(monkeypatch):
    made = populate(20)
    source, target = source_and_target()
    calls = counted_fences(monkeypatch)
    run("--to", target, "--buckets", MOVED)
    assert calls == [source]
    assert BucketMove.objects.get().phase == "done"
    assert_moved_and_exact(made, target)


def test_a_mover_resumed_after_the_fence_fences_once_more(monkeypatch):
    """The mover dies once the fence is recorded: the one that resumes cannot know whether
    the kill happened, and ends the sessions again, once."""
    made = populate(20)
    source, target = source_and_target()

    class Died(Exception):
        pass

    def die(self: Mover) -> None:
        raise Died

    with monkeypatch.context() as patched:
        patched.setattr(Mover, "flip", die)
        with pytest.raises(Died):
            run("--to", target, "--buckets", MOVED)
    assert BucketMove.objects.get().phase == "fenced"
    calls = counted_fences(monkeypatch)
    assert "Resuming move" in run("--to", target, "--buckets", MOVED)
    assert calls == [source]
    assert_moved_and_exact(made, target)

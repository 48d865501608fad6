"""A hostile review of issue 43's move fixes: a mover killed between two steps of the new
verify code, and what the resumed mover then misses (tests/support/moving.py's "death": an
exception raised where a SIGKILL would stop the mover)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError
from django.db import connections

from schemaless_store.config.metadata import BucketMove
from schemaless_store.moves.mover import Mover
from schemaless_store.tables import move_log
from schemaless_store.topology import bucket_map
from tests.support import STORE
from tests.support.moving import MOVED, MOVED_SET, MoverDied, populate, run, source_and_target

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def corrupt_copy(target: str, moved, other) -> None:
    """The target's copy of ``moved`` gets the body of ``other`` (as a faulty copy would
    leave it), with no write since the flip to explain it."""
    with connections[target].cursor() as cursor:
        cursor.execute("SELECT body FROM entities WHERE id = %s", [other.bytes])
        body = cursor.fetchone()[0]
        cursor.execute("UPDATE entities SET body = %s WHERE id = %s", [body, moved.bytes])


def test_a_mover_killed_after_dropping_the_targets_log_and_before_its_verdict_still_fails(
    monkeypatch,
):
    """verify() reaches its verdict (the copies differ), drops the target's change log, and
    dies before it saves the verdict. The resumed mover has neither the snapshot nor the
    target's log: it must not pass the copies unseen and delete the sources' good copy."""
    made = populate(20)
    source, target = source_and_target()
    moved, other = [i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET][:2]
    flip = Mover.flip

    def flip_after(mover):
        corrupt_copy(target, moved, other)
        flip(mover)

    remove = move_log.remove

    def remove_then_die(alias, tables):
        left = remove(alias, tables)
        if alias == target:
            raise MoverDied
        return left

    with monkeypatch.context() as patched:
        patched.setattr(Mover, "flip", flip_after)
        patched.setattr(move_log, "remove", remove_then_die)
        with pytest.raises(MoverDied):
            run("--to", target, "--buckets", MOVED)
    # Killed at the first drop of the target's log: before the verdict is saved, or after.
    assert BucketMove.objects.get().phase in ("flipped", "failed")
    with pytest.raises(CommandError, match="differ"):
        run("--to", target, "--buckets", MOVED)
    assert BucketMove.objects.get().phase == "failed"
    with connections[source].cursor() as cursor:  # the sources' copies are kept
        cursor.execute("SELECT COUNT(*) FROM entities WHERE id = %s", [moved.bytes])
        assert cursor.fetchone()[0] == 1

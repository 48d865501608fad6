"""A mover resumed at or after the flip (issue 43, finding 5 and the "Moves" items): the map
it published stays published, the copies are still compared, and a write the new owner took
since the flip is never taken for a difference between the copies.

A mover "dies" by an exception raised where a SIGKILL would stop it (tests/support/moving.py);
the same command run again resumes the move from its record.
"""

from __future__ import annotations

import pytest
from django.core.management import CommandError
from django.db import connections

from schemaless_store.config.metadata import BucketMove
from schemaless_store.models import Entity
from schemaless_store.moves.mover import Mover
from schemaless_store.topology import bucket_map
from tests.support import STORE
from tests.support.moving import (
    MOVED,
    MOVED_SET,
    MoverDied,
    assert_moved_and_exact,
    populate,
    run,
    source_and_target,
)

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def dies_once_flipped(monkeypatch, target: str) -> None:
    """Run the move with its mover dying after the flip published the new map and before
    the phase ``flipped`` was recorded (the metadata server died between the two)."""
    saved = Mover._save

    def save(mover, **changes):
        if changes.get("phase") == "flipped":
            raise MoverDied
        saved(mover, **changes)

    with monkeypatch.context() as patched:
        patched.setattr(Mover, "_save", save)
        with pytest.raises(MoverDied):
            run("--to", target, "--buckets", MOVED)


def test_a_mover_resumed_after_it_published_the_flip_keeps_the_map_and_passes_equal_copies(
    monkeypatch,
):
    made = populate(20)
    _source, target = source_and_target()
    dies_once_flipped(monkeypatch, target)
    assert BucketMove.objects.get().phase == "fenced"
    published = bucket_map.stored()
    assert all(published.owners[n] == target for n in MOVED_SET)
    # The new owner serves writes by the published map before the mover is run again.
    bucket_map.forget()
    written = next(i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    entity = Entity.objects.get(id=written)
    entity["title"] = "written on the new owner after the flip"
    entity.save()
    assert entity.shard == target
    made[written]["title"] = entity["title"]
    run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert move.phase == "done", move.message
    assert bucket_map.stored().version == published.version  # the flip was not made again
    assert_moved_and_exact(made, target)


def dies_before_verifying(monkeypatch, target: str, before_flip=lambda: None) -> None:
    """Run the move with ``before_flip`` called as the flip starts and the mover dying as the
    verification starts: the snapshot taken at the flip dies with it."""
    flip = Mover.flip

    def flip_after(mover):
        before_flip()
        flip(mover)

    def die(_mover):
        raise MoverDied

    with monkeypatch.context() as patched:
        patched.setattr(Mover, "flip", flip_after)
        patched.setattr(Mover, "verify", die)
        with pytest.raises(MoverDied):
            run("--to", target, "--buckets", MOVED)
    assert BucketMove.objects.get().phase == "flipped"


def test_a_mover_resumed_after_the_flip_compares_the_copies_leaving_out_the_owners_writes(
    monkeypatch,
):
    made = populate(20)
    _source, target = source_and_target()
    dies_before_verifying(monkeypatch, target)
    bucket_map.forget()
    moved = [i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET]
    for number, entity_id in enumerate(moved[:3]):  # the owner's writes since the flip
        entity = Entity.objects.get(id=entity_id)
        entity["title"] = f"after the flip {number}"
        entity.save()
        made[entity_id]["title"] = entity["title"]
    Entity.objects.get(id=moved[3]).delete()
    del made[moved[3]]
    run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert move.phase == "done", move.message
    assert move.counts["verified"] is True  # compared, though resumed after the flip
    assert_moved_and_exact(made, target)


def test_a_mover_resumed_after_the_flip_still_finds_copies_that_differ(monkeypatch):
    """A target row that differs from the source's (as a faulty copy would leave it), with
    no write since the flip to explain it: the resumed mover stops as one with its snapshot
    does, keeping the sources' copies."""
    made = populate(20)
    source, target = source_and_target()
    moved, other = [i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET][:2]

    def corrupt() -> None:  # the copy of ``moved`` gets the body of ``other``
        with connections[target].cursor() as cursor:
            cursor.execute("SELECT body FROM entities WHERE id = %s", [other.bytes])
            body = cursor.fetchone()[0]
            cursor.execute("UPDATE entities SET body = %s WHERE id = %s", [body, moved.bytes])

    dies_before_verifying(monkeypatch, target, corrupt)
    with pytest.raises(CommandError, match="the copies differ after the flip"):
        run("--to", target, "--buckets", MOVED)
    assert BucketMove.objects.get().phase == "failed"
    with connections[source].cursor() as cursor:  # the sources' copies are kept
        cursor.execute("SELECT COUNT(*) FROM entities WHERE id = %s", [moved.bytes])
        assert cursor.fetchone()[0] == 1

"""A hostile review of issue 43's move fixes: a mover killed between two steps of the new
verify code, and what the resumed mover then misses (tests/support/moving.py's "death": an
exception raised where a SIGKILL would stop the mover)."""

from __future__ import annotations

import contextlib

import pytest
from django.core.management import CommandError
from django.db import connections

from schemaless_store.config.metadata import BucketMove
from schemaless_store.models import Entity
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


def test_a_mover_killed_right_after_it_recreated_a_silent_trigger_still_copies_again(
    monkeypatch,
):
    """As test_move_triggers' resumed mover whose trigger stopped logging, but the resumed
    mover dies again just after its probe recreated the trigger, before it recorded that the
    copy must start again. Run once more, its probe finds every trigger logging: it must not
    take the copy (which missed the update made while the trigger was silent) for complete."""
    from tests.moves.test_move_triggers import decoy
    from tests.support.moving import assert_moved_and_exact, dies_at

    made = populate(20)
    source, target = source_and_target()
    dies_at(monkeypatch, "catch_up", "--to", target, "--buckets", MOVED)
    with connections[source].cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {move_log.trigger_name('entities', 'u')}")
    decoy(source, "entities", "u")
    moved = next(i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    entity = Entity.objects.get(id=moved)
    entity["title"] = "written while the trigger logged nothing"
    entity.save()
    made[moved]["title"] = entity["title"]
    install = move_log.install

    def install_then_die(alias, tables):
        repaired = install(alias, tables)
        if repaired:
            raise MoverDied
        return repaired

    with monkeypatch.context() as patched:
        patched.setattr(move_log, "install", install_then_die)
        with pytest.raises(MoverDied):
            run("--to", target, "--buckets", MOVED)
    run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert (move.phase, move.counts["verified"]) == ("done", True), move.message
    assert_moved_and_exact(made, target)


def test_a_probe_whose_sampled_row_a_writer_deletes_meanwhile_does_not_refuse_the_move(
    monkeypatch,
):
    """MariaDB: the probe picks a live row of the source, then updates and deletes it. A
    writer that deletes that row in between (since the probe reads its row locked, a writer
    of that row waits: the writer here deletes another row the probe could have read; any
    row of the shard:
    the buckets that are not moving take writes while the move is fenced) leaves the probe's
    UPDATE and DELETE matching nothing, so their triggers "logged nothing": a resumed mover,
    fenced, is refused (to be aborted) although every trigger logs."""
    if connections["shard_0"].vendor != "mysql":
        pytest.skip("SQLite serializes the probe with every writer (the store's write lock)")
    from schemaless_store.tables import capture_probe
    from tests.support.moving import dies_at

    populate(20)
    source, target = source_and_target()
    bystanders = [  # entities of the source in buckets that are not moving
        e
        for e in (Entity.objects.create(title="bystander") for _ in range(80))
        if bucket_map.alias_for(e.id.bytes) == source
        and bucket_map.bucket_for(e.id.bytes) not in MOVED_SET
    ][:2]
    dies_at(monkeypatch, "flip", "--to", target, "--buckets", MOVED)
    assert BucketMove.objects.get().phase == "fenced"
    sample = capture_probe._sample
    raced = []

    def sampled_then_deleted(alias, table, names):
        row, here = sample(alias, table, names)
        if alias == source and table.name == "entities" and not raced:
            # Not the row the probe read locked: a writer of that one waits for its rollback.
            held = bytes(row[names.index("id")])
            bystander = next(e for e in bystanders if e.id.bytes != held)
            with connections[alias].cursor() as cursor:  # the row LIMIT 1 could have given
                cols = ", ".join(f"`{c}`" for c in names)
                cursor.execute(f"SELECT {cols} FROM entities WHERE id = %s", [bystander.id.bytes])
                row, here = tuple(cursor.fetchone()), True
            writer = connections.create_connection(alias)  # a writer's session
            try:
                with writer.cursor() as cursor:
                    cursor.execute("DELETE FROM entities WHERE id = %s", [bystander.id.bytes])
            finally:
                writer.close()
            raced.append(True)
        return row, here

    monkeypatch.setattr(capture_probe, "_sample", sampled_then_deleted)
    run("--to", target, "--buckets", MOVED)
    assert raced
    move = BucketMove.objects.get()
    assert (move.phase, move.counts["verified"]) == ("done", True), move.message


def test_a_resumed_mover_finds_a_stale_copy_even_after_the_owner_wrote_the_key(monkeypatch):
    """The copy of a key missed its last acknowledged write before the flip; the mover dies
    after publishing the flip, before recording it (its snapshot dies with it); the new owner
    then writes the key (another property, from the stale copy). The resumed mover must fail
    the move, keeping the sources' good row: the target's pre-image of the key (its row at
    the flip) is what it compares, not the row as the owner wrote it since (before the
    pre-images: the key was left out of the comparison, the move passed and the cleaning
    deleted the sources' row)."""
    made = populate(20)
    source, target = source_and_target()
    moved = next(i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    with connections[source].cursor() as cursor:
        cursor.execute("SELECT body FROM entities WHERE id = %s", [moved.bytes])
        stale = cursor.fetchone()[0]
    entity = Entity.objects.get(id=moved)
    entity["title"] = "the last acknowledged title"
    entity.save()
    flip = Mover.flip

    def flip_with_a_stale_copy(mover):  # as a replay that missed the update would leave it
        with connections[target].cursor() as cursor:
            cursor.execute("UPDATE entities SET body = %s WHERE id = %s", [stale, moved.bytes])
        flip(mover)

    saved = Mover._save

    def save(mover, **changes):  # dies after publishing the flip, before recording it
        if changes.get("phase") == "flipped":
            raise MoverDied
        saved(mover, **changes)

    with monkeypatch.context() as patched:
        patched.setattr(Mover, "flip", flip_with_a_stale_copy)
        patched.setattr(Mover, "_save", save)
        with pytest.raises(MoverDied):
            run("--to", target, "--buckets", MOVED)
    bucket_map.forget()
    written = Entity.objects.get(id=moved)  # the new owner serves its stale copy
    assert written["title"] != "the last acknowledged title"
    written["tags"] = ["c"]  # an ordinary write of another property
    written.save()
    with contextlib.suppress(CommandError):
        run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert move.phase in ("failed", "held"), (move.phase, move.counts.get("verified"))


def test_an_abort_after_a_published_flip_never_purges_the_new_owners_writes(monkeypatch):
    """The mover dies after publishing the flip, before recording it: the move still reads
    ``fenced``, a phase ``--abort`` accepts. The new owner has taken writes by the published
    map; an abort must not purge them from the target (nor give the buckets back to sources
    the map no longer names)."""
    from tests.moves.test_move_resume import dies_once_flipped
    from tests.support.moving import assert_moved_and_exact

    made = populate(20)
    _source, target = source_and_target()
    dies_once_flipped(monkeypatch, target)
    assert BucketMove.objects.get().phase == "fenced"
    bucket_map.forget()
    written = next(i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    entity = Entity.objects.get(id=written)
    entity["title"] = "acknowledged by the new owner"
    entity.save()
    assert entity.shard == target
    with contextlib.suppress(CommandError):
        run("--abort")
    bucket_map.forget()
    assert Entity.objects.get(id=written)["title"] == "acknowledged by the new owner"
    made[written]["title"] = entity["title"]
    run("--to", target, "--buckets", MOVED)  # the move, refused an abort, is finished
    assert BucketMove.objects.get().phase == "done"
    assert_moved_and_exact(made, target)


def test_a_move_run_again_after_a_half_done_abort_never_keeps_a_copy_that_missed_writes(
    monkeypatch,
):
    """``--abort`` dies after it gave the buckets back to the sources and dropped their
    triggers and logs, before it purged the target. The phase still reads ``fenced``; the
    operator runs the move again instead. A writer updated a moved entity on the source in
    between (it served the bucket again, unlogged): the resumed mover must not flip a copy
    that misses it (before: its probe found fresh triggers, it flipped, and the move failed)."""
    from tests.support.moving import assert_moved_and_exact, dies_at

    made = populate(20)
    _source, target = source_and_target()
    dies_at(monkeypatch, "flip", "--to", target, "--buckets", MOVED)

    def die(_mover, _alias, _what):
        raise MoverDied

    with monkeypatch.context() as patched:
        patched.setattr(Mover, "_purge", die)
        with pytest.raises(MoverDied):
            run("--abort")
    assert BucketMove.objects.get().phase == "fenced"
    bucket_map.forget()
    moved = next(i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    entity = Entity.objects.get(id=moved)
    entity["title"] = "written while the abort was half done"
    entity.save()
    made[moved]["title"] = entity["title"]
    with contextlib.suppress(CommandError):
        run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.order_by("pk").last()
    assert move.phase != "failed", move.message
    if move.phase != "done":  # refused: abort, then the move again
        run("--abort")
        run("--to", target, "--buckets", MOVED)
    assert BucketMove.objects.order_by("pk").last().phase == "done"
    assert_moved_and_exact(made, target)

"""A write that escaped the fence (issue 34, item 7; docs/resharding.md#escaped-writes): a
change to a moved row on a source after the flip is never passed over. The move keeps the
sources' copies, is held, names the keys and says what to do next; ``--release`` finishes it
once the operator has dealt with them. A stale index row removed on a source is no escaped
write (docs/design.md#moves): the move goes on.

The escape is made by hand: a statement run on the source's own connection after the flip (the
fence stops the store's writes; what these tests stand for is a session it missed).
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from django.core.management import CommandError
from django.db import connections

from schemaless_store.config.metadata import BucketMove
from schemaless_store.exceptions import NotOwner
from schemaless_store.models import Entity
from schemaless_store.moves.mover import Mover
from schemaless_store.tables import move_log as capture
from schemaless_store.tables.moved_rows import moved_tables
from schemaless_store.topology import bucket_map
from schemaless_store.writes import stale_rows
from tests.support import STORE, buckets
from tests.support.invariants import assert_exact
from tests.support.moving import (
    MOVED,
    MOVED_SET,
    assert_moved_and_exact,
    dies_at,
    ids_per_shard,
    populate,
    run,
    source_and_target,
)
from tests.testapp.indexes import user_id_index

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def moved_ids(made: dict[uuid.UUID, dict]) -> list[uuid.UUID]:
    return [i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET]


def update_a_body(source: str, entity_id: uuid.UUID) -> str:
    with connections[source].cursor() as cursor:
        cursor.execute("UPDATE entities SET body = body WHERE id = %s", [entity_id.bytes])
    return "entities"


def delete_an_entity(source: str, entity_id: uuid.UUID) -> str:
    with connections[source].cursor() as cursor:
        cursor.execute("DELETE FROM entities WHERE id = %s", [entity_id.bytes])
    return "entities"


def add_a_cell(source: str, entity_id: uuid.UUID) -> str:
    with connections[source].cursor() as cursor:
        cursor.execute(
            "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
            "SELECT row_key, column_name, ref_key + 100, body, created_at FROM cell "
            "WHERE row_key = %s AND ref_key = 1",
            [entity_id.bytes],
        )
        assert cursor.rowcount == 1
    return "cell"


def moved_user_id() -> tuple[bytes, object]:
    """A ``user_id`` whose index rows are in a moved bucket, and its index column value."""
    number = 0
    while True:
        user_id = number.to_bytes(16, "big")
        value = user_id_index.column_value("user_id", user_id)
        if bucket_map.bucket_for(user_id_index.routing_key(value)) in MOVED_SET:
            return user_id, value
        number += 1


def add_an_index_row(source: str, entity_id: uuid.UUID) -> str:
    """An index row of the entity, in a moved bucket (by its value), that the target lacks."""
    _user_id, value = moved_user_id()
    with connections[source].cursor() as cursor:
        cursor.execute(
            "INSERT INTO index_user_id (user_id, entity_id) VALUES (%s, %s)",
            [value, entity_id.bytes],
        )
    return "index_user_id"


def escape_after_the_flip(monkeypatch, change, entity_id: uuid.UUID, source: str) -> list[str]:
    """Run ``change`` on the source as the verification starts (after the flip)."""
    real_verify = Mover.verify
    tables: list[str] = []

    def verify(self: Mover) -> None:
        tables.append(change(source, entity_id))
        real_verify(self)

    monkeypatch.setattr(Mover, "verify", verify)
    return tables


@pytest.mark.parametrize("change", [update_a_body, delete_an_entity, add_a_cell, add_an_index_row])
def test_a_change_on_the_source_after_the_flip_holds_the_move_and_keeps_the_copies(
    monkeypatch, change
):
    made = populate(40)
    source, target = source_and_target()
    # The first ten have cells (populate): an entity with cells, in the moving buckets.
    entity_id = next(i for i in list(made)[:10] if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    tables = escape_after_the_flip(monkeypatch, change, entity_id, source)
    with pytest.raises(CommandError, match="escaped the fence") as info:
        run("--to", target, "--buckets", MOVED)
    said = str(info.value)
    assert f"{tables[0]} {entity_id.bytes.hex()}" in said
    assert "the sources' copies are kept" in said and "--release" in said
    move = BucketMove.objects.get()
    assert move.phase == "held"
    assert move.finished is None
    assert move.counts["escaped"] == {tables[0]: [entity_id.bytes.hex()]}
    assert "--release" in move.message
    # Nothing was deleted on the source: every moved entity is still there (but the one the
    # escaped write deleted), and on the target.
    placed = ids_per_shard()
    for moved in moved_ids(made):
        want = [target] if change is delete_an_entity and moved == entity_id else [source, target]
        assert sorted(placed[moved.bytes]) == sorted(want)
    assert capture.installed(source)  # a held move's source keeps logging until its release
    status = run("--status")
    assert "held" in status and "no (1 escaped write)" in status
    # Another move waits for this one to be released.
    with pytest.raises(CommandError, match="held"):
        run("--to", source, "--buckets", "300-310")
    # The operator deals with the key (here: nothing to keep), then releases the move.
    out = run("--release", str(move.pk))
    assert f"Move #{move.pk} released" in out
    move.refresh_from_db()
    assert move.phase == "done"
    assert not capture.installed(source)
    assert_moved_and_exact(made, target)


def test_a_stale_index_row_removed_on_the_source_after_the_flip_is_no_escaped_write(
    monkeypatch,
):
    """Index rows are hints read through their entity: one the source drops after the flip
    (a stale row's removal) leaves the target a row more, never a write less."""
    made = populate(40)
    source, target = source_and_target()
    user_id, value = moved_user_id()
    entity_id = Entity.objects.create(user_id=user_id, title="indexed in a moved bucket").id
    made[entity_id] = {"user_id": user_id, "title": "indexed in a moved bucket"}
    key = entity_id.bytes

    def drop_index_rows(alias: str, _key: uuid.UUID) -> str:
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "DELETE FROM index_user_id WHERE user_id = %s AND entity_id = %s", [value, key]
            )
            assert cursor.rowcount == 1
        return "index_user_id"

    escape_after_the_flip(monkeypatch, drop_index_rows, entity_id, source)
    run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert move.phase == "done"
    assert move.counts["verified"] is True
    assert move.counts["changed after the flip"] == 1
    assert Entity.objects.get(id=entity_id)["title"] == made[entity_id]["title"]


def test_release_refuses_a_move_that_is_not_held():
    populate(10)
    _source, target = source_and_target()
    run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    with pytest.raises(CommandError, match="is done, not held or failed"):
        run("--release", str(move.pk))
    with pytest.raises(CommandError, match="no move #999"):
        run("--release", "999")


def test_a_mover_resumed_after_the_flip_still_holds_for_an_escaped_write(monkeypatch):
    """The mover dies between the flip and its verification (its snapshot of the target dies
    with it); a write escapes meanwhile. The resumed mover cannot compare the copies, but it
    still judges the logged change, and holds."""
    made = populate(40)
    source, target = source_and_target()
    entity_id = moved_ids(made)[0]

    dies_at(
        monkeypatch,
        "verify",
        "--to",
        target,
        "--buckets",
        MOVED,
        before=lambda: update_a_body(source, entity_id),
    )
    assert BucketMove.objects.get().phase == "flipped"
    with pytest.raises(CommandError, match="escaped the fence"):
        run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert move.phase == "held"
    assert move.counts["escaped"] == {"entities": [entity_id.bytes.hex()]}
    assert sorted(ids_per_shard()[entity_id.bytes]) == sorted([source, target])


def test_step_5s_galera_recheck_after_a_flip_is_fenced_and_no_escaped_write(monkeypatch):
    """Step 5's re-check on Galera writes the entity rows (docs/design.md#galera). A move that
    fences and flips the entity's bucket between step 5's removal and that re-check must not
    see it as an escaped write: the re-check is fenced as every write is, is refused on the
    old shard, and runs on the owner. (Unfenced, it wrote the source's frozen copy after the
    flip and the move was held: the hold found by the 25-minute Galera soak.) Galera is
    stood in for by the step's own check; the statements are MariaDB's."""
    if connections["shard_0"].vendor != "mysql":
        pytest.skip("the re-check's statements are MariaDB's (it runs on Galera shards only)")
    entity_id = buckets.id_in_bucket(7)
    entity = Entity.objects.create(id=entity_id, user_id=b"\x01" * 16, title="before")
    source, target = source_and_target()
    monkeypatch.setattr(stale_rows, "servers", SimpleNamespace(is_galera=lambda _alias: True))
    real_recheck, real_verify = stale_rows._certified_recheck, Mover.verify
    raced: list[object] = []

    on_owner: list[tuple[object, ...]] = []

    def recheck_after_a_move(*args: object) -> int:
        if raced:  # on the owner, after the move
            on_owner.append(args)
            return real_recheck(*args)

        def verify(self: Mover) -> None:  # the re-check runs after the flip
            try:
                raced.append(real_recheck(*args))
            except NotOwner as refused:
                raced.append(refused)
            real_verify(self)

        with monkeypatch.context() as patched:
            patched.setattr(Mover, "verify", verify)
            run("--to", target, "--buckets", MOVED)
        if isinstance(raced[0], NotOwner):
            raise raced[0]
        return int(raced[0])

    monkeypatch.setattr(stale_rows, "_certified_recheck", recheck_after_a_move)
    entity["user_id"] = b"\x02" * 16  # step 5 removes the row of the old user_id
    entity.save()
    assert isinstance(raced[0], NotOwner) and raced[0].alias == source
    # The re-check of the row step 5 deleted runs on the owner (not step 5 again).
    [(alias, deleted, *_rest)] = on_owner
    assert alias == target and [row[2] for row in deleted] == [entity_id.bytes]
    move = BucketMove.objects.get()
    assert (move.phase, move.counts["verified"]) == ("done", True)
    bucket_map.forget()
    assert ids_per_shard()[entity_id.bytes] == [target]
    assert Entity.objects.get(id=entity_id)["user_id"] == b"\x02" * 16
    assert_exact()


def user_id_indexed_in(wanted) -> tuple[bytes, object]:
    """A ``user_id`` whose index row's bucket passes ``wanted``, and its column value."""
    number = 1000
    while True:
        user_id = number.to_bytes(16, "big")
        value = user_id_index.column_value("user_id", user_id)
        if wanted(bucket_map.bucket_for(user_id_index.routing_key(value))):
            return user_id, value
        number += 1


def test_a_resumed_mover_does_not_hold_for_a_stale_index_row_the_owner_removed(monkeypatch):
    """The mover dies between the flip and its verification, so the resumed one has no
    snapshot of the target as it was at the flip. Meanwhile an ordinary write changes an
    entity the source still serves (its bucket is not moved): its new index row lands on the
    source (in a bucket the source keeps), so the source's log names the entity; its old
    index row, in a moved bucket, is removed by its new owner. The source's frozen copy of
    that old row is then on the source and not on the target, yet no write escaped: the
    entity no longer implies it. The move is verified, not held. (Held, it was the hold of
    the 25-minute single-server soak: a mover resumed after the flip by a SIGKILL.)"""
    populate(10)
    source, target = source_and_target()
    owners = bucket_map.current().owners
    old_user, old_value = user_id_indexed_in(lambda b: b in MOVED_SET)
    new_user, _new_value = user_id_indexed_in(lambda b: b not in MOVED_SET and owners[b] == source)
    kept = next(b for b in range(300, len(owners)) if owners[b] == source)
    entity = Entity.objects.create(id=buckets.id_in_bucket(kept), user_id=old_user, title="t")

    dies_at(monkeypatch, "verify", "--to", target, "--buckets", MOVED)
    bucket_map.forget()
    entity["user_id"] = new_user  # its old row's bucket is the target's now: removed there
    entity.save()
    with connections[target].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM index_user_id WHERE user_id = %s", [old_value])
        assert cursor.fetchone()[0] == 0
    run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert move.phase == "done", move.message
    # Resumed after the flip: compared with the target's pre-images of its writes since.
    assert move.counts["verified"] is True
    assert move.counts["changed after the flip"] >= 1
    assert Entity.objects.get(id=entity.id)["user_id"] == new_user
    assert_exact()


def test_a_resumed_mover_without_pre_images_holds_for_an_index_row_its_entity_implies(
    monkeypatch,
):
    """A move flipped by a mover from before the target's pre-images (none on the target):
    the resumed mover has neither the snapshot nor the target's rows of the flip, and an
    index row the source has and the target lacks now holds the move while its entity still
    implies it: dropping the source's copy would leave the entity without that row."""
    populate(10)
    source, target = source_and_target()
    owners = bucket_map.current().owners
    user, value = user_id_indexed_in(lambda b: b in MOVED_SET)
    kept = next(b for b in range(300, len(owners)) if owners[b] == source)
    entity = Entity.objects.create(id=buckets.id_in_bucket(kept), user_id=user, title="t")
    key = entity.id.bytes
    dies_at(monkeypatch, "verify", "--to", target, "--buckets", MOVED)
    capture.remove(target, moved_tables())  # as an older mover's flip left the target
    with connections[target].cursor() as cursor:  # the owner lost it
        cursor.execute(
            "DELETE FROM index_user_id WHERE user_id = %s AND entity_id = %s", [value, key]
        )
    with connections[source].cursor() as cursor:  # a change on the source after the flip
        cursor.execute("UPDATE index_user_id SET entity_id = entity_id WHERE entity_id = %s", [key])
    with pytest.raises(CommandError, match="escaped the fence"):
        run("--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert move.phase == "held"
    assert move.counts["escaped"] == {"index_user_id": [key.hex()]}


def test_a_change_log_gone_before_the_verification_holds_the_move(monkeypatch):
    """The verdict is saved before the logs are dropped, so a log missing when a resumed mover
    verifies was dropped by something else: writes after the flip cannot be judged, and the
    move is held rather than passed."""
    populate(10)
    source, target = source_and_target()
    dies_at(monkeypatch, "verify", "--to", target, "--buckets", MOVED)
    capture.remove(source, moved_tables())
    with pytest.raises(CommandError, match=r"change log on .* is gone"):
        run("--to", target, "--buckets", MOVED)
    assert BucketMove.objects.get().phase == "held"


def test_a_mover_dying_after_its_verdict_drops_the_logs_when_resumed(monkeypatch):
    made = populate(20)
    source, target = source_and_target()
    dies_at(monkeypatch, "_drop_logs", "--to", target, "--buckets", MOVED)
    move = BucketMove.objects.get()
    assert (move.phase, move.counts["verified"]) == ("cleaning", True)
    assert capture.installed(source)
    run("--to", target, "--buckets", MOVED)
    assert BucketMove.objects.get().phase == "done"
    assert not capture.installed(source)
    assert_moved_and_exact(made, target)

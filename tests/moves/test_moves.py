"""``movebuckets``: buckets move between the two shards while writers run (docs/resharding.md).

Afterwards every acknowledged write is there in its last state, every id is on exactly one
shard, index tables are exact (I3) and queries answer exactly; bad input changes nothing; a
mover killed with SIGKILL resumes; a move that has not flipped can be aborted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import random
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import override_settings

from schemaless_store.config.metadata import BucketMove
from schemaless_store.exceptions import NotOwner
from schemaless_store.guards.throttle import Throttle
from schemaless_store.models import Cell, Entity
from schemaless_store.moves import mover
from schemaless_store.moves.mover import Mover
from schemaless_store.tables import buckets as bucket_table
from schemaless_store.tables import move_log as capture
from schemaless_store.topology import bucket_map, shards
from schemaless_store.writes import protocol
from tests.support import STORE, buckets, child
from tests.support.invariants import assert_exact
from tests.support.moving import (
    MOVED,
    MOVED_SET,
    assert_moved_and_exact,
    ids_per_shard,
    populate,
    run,
    source_and_target,
)

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def test_a_move_and_back_keeps_everything_and_moves_cells_and_unique_values():
    made = populate()
    source, target = source_and_target()
    text = run("--to", target, "--buckets", MOVED)
    assert f": 300 buckets (0-299) to {target}, from {source} (300 buckets)." in text
    assert re.search(rf"done: 0-299 now on {target}; [\d,]+ rows copied \([\d,]+ entit", text)
    assert re.search(r"; took (\d+ min )?\d+ s\.$", text.strip())
    assert "verified" in text
    assert bucket_map.refresh().version == 3  # the moving mark, then the flip
    assert not bucket_map.refresh().moving
    assert_moved_and_exact(made, target)
    moved_cells = [i for i in list(made)[:10] if bucket_map.bucket_for(i.bytes) in MOVED_SET]
    assert moved_cells
    for entity_id in moved_cells:
        assert Cell.objects.get_cell(entity_id, "profile").body == {"v": 2}
        assert [c.ref_key for c in Cell.objects.versions(entity_id, "profile")] == [1, 2]
    assert [e.id for e in Entity.objects.filter_index(username="user0")] == [
        next(i for i, p in made.items() if p.get("username") == "user0")
    ]
    states = bucket_table.states(source, list(range(300)))
    assert set(states.values()) == {bucket_table.GONE}
    assert not capture.installed(source)
    assert "Nothing to move: buckets 0-299 are on" in run("--to", target, "--buckets", MOVED)
    run("--to", source, "--buckets", MOVED)
    assert_moved_and_exact(made, source)
    assert set(bucket_table.states(source, list(range(300))).values()) == {bucket_table.OWNED}


@contextlib.contextmanager
def writing(made: dict[uuid.UUID, dict]) -> Iterator[dict[uuid.UUID, dict | None]]:
    """A writer thread creating entities in the moving buckets, updating indexed values and
    deleting, until the block ends; yields what it acknowledged (None: deleted). A write
    refused because a move stopped at its fence (``NotOwner`` after ``MOVE_WAIT``) is not
    acknowledged, and is no error."""
    acknowledged: dict[uuid.UUID, dict | None] = dict(made)
    stop = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def write() -> None:
        rng = random.Random(7)
        try:
            while not stop.is_set():
                choice = rng.random()
                with lock:
                    known = [i for i, props in acknowledged.items() if props is not None]
                try:
                    if choice < 0.5 or not known:
                        entity_id = buckets.id_in_bucket(rng.randrange(300))
                        props = {"user_id": bytes([rng.randrange(7)]) * 16, "title": "new"}
                        Entity.objects.create(id=entity_id, **props)
                    elif choice < 0.8:
                        entity_id = rng.choice(known)
                        props = {"user_id": bytes([rng.randrange(7)]) * 16, "title": "changed"}
                        entity = Entity.objects.get(id=entity_id)
                        for key, value in props.items():
                            entity[key] = value
                        entity.save()
                        props = {k: entity[k] for k in ("user_id", "title")}
                    else:
                        entity_id = rng.choice(known)
                        Entity.objects.get(id=entity_id).delete()
                        props = None
                except NotOwner:
                    continue
                with lock:
                    acknowledged[entity_id] = props
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        time.sleep(0.3)
        yield acknowledged
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors


def test_writers_keep_writing_during_a_move_and_nothing_acknowledged_is_lost():
    made = populate(40)
    _source, target = source_and_target()
    with writing(made) as acknowledged:
        run("--to", target, "--buckets", MOVED, "--batch", "7")
    expected = {i: p for i, p in acknowledged.items() if p is not None}
    assert len(expected) > len(made) // 2
    assert_moved_and_exact(expected, target)


@pytest.mark.slow
@pytest.mark.parametrize("point", list(child.MOVER_KILL_POINTS))
def test_a_mover_killed_before_each_phase_resumes_while_a_writer_runs(point):
    """SIGKILL before every phase's work (and inside the triggers' install and the deletion),
    a writer running throughout; the command run again finishes the move, exactly."""
    made = populate(40)
    _source, target = source_and_target()
    args = ("movebuckets", "--to", target, "--buckets", MOVED, "--batch", "7")
    with writing(made) as acknowledged:
        killed = child.spawn("killedmover", point, *args, stdout=subprocess.DEVNULL)
        assert killed.wait(timeout=120) == -signal.SIGKILL
        child.reconnect()
        assert BucketMove.objects.get().phase == child.MOVER_KILL_POINTS[point]
        done = child.manage(*args)
        assert done.returncode == 0, done.stderr
        assert "Resuming move" in done.stdout
    move = BucketMove.objects.get()
    assert move.phase == "done"
    # Killed after the flip but before its verification, the snapshot taken at the flip died
    # with the mover: the resumed one compares by the target's log of its writes since.
    assert move.counts["verified"] is True
    expected = {i: p for i, p in acknowledged.items() if p is not None}
    assert_moved_and_exact(expected, target)


def test_a_dry_run_prints_the_plan_and_changes_nothing():
    made = populate(30)
    source, target = source_and_target()
    moving = sum(1 for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    text = run("--to", target, "--buckets", MOVED, "--dry-run")
    assert f"Dry run: 300 buckets to {target}; nothing is changed." in text
    assert f"from {source}: 300 buckets (0-299); " in text
    assert f" rows: entities {moving:,}," in text
    assert BucketMove.objects.count() == 0
    assert bucket_map.refresh().version == 1
    assert set(bucket_table.states(target, list(range(300))).values()) <= {bucket_table.GONE}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to", "nope", "--buckets", "1"], "^--to: 'nope' is not a shard alias; the shards "),
        (["--to", "TARGET", "--buckets", "4090-4100"], "^--buckets: 4090-4100 is outside 0-4095"),
        (["--to", "TARGET", "--buckets", "99-0"], "^--buckets: the range 99-0 is backwards"),
        (["--to", "TARGET", "--buckets", "x"], "^--buckets: 'x' is not a bucket number"),
        (["--to", "SOURCE", "--buckets", "0-3"], "owns buckets 0-3 already"),
        (["--buckets", "0-3"], "give --to ALIAS and --buckets"),
        (["--to", "TARGET", "--buckets", "0-3", "--duty", "0"], "--duty: must be a share above"),
        (["--to", "TARGET", "--buckets", "0-3", "--batch", "0"], "--batch: must be a whole"),
        (["--to", "TARGET", "--buckets", "0-3", "--sleep", "-1"], "--sleep: must be a number"),
        (["--to", "TARGET", "--buckets", "0-3", "--max-latency", "-5"], "--max-latency: must be"),
    ],
)
def test_bad_input_is_refused_with_nothing_changed(args, message):
    source, target = source_and_target()
    args = [{"TARGET": target, "SOURCE": source}.get(a, a) for a in args]
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert BucketMove.objects.count() == 0
    assert bucket_map.refresh().version == 1


def test_the_copy_and_the_deletion_are_throttled_as_the_cleaner_is(monkeypatch):
    made = populate(30)
    _source, target = source_and_target()
    moving = sum(1 for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET)
    pauses: list[tuple[Throttle, float]] = []
    real_after = Throttle.after

    def after(self: Throttle, began: float, wait=time.sleep, probe=None) -> float:
        pauses.append((self, self.pause(time.monotonic() - began)))
        assert probe is not None and probe() < 1.0  # the move's servers, probed
        return real_after(self, began, wait, probe)

    monkeypatch.setattr(Throttle, "after", after)
    args = ("--batch", "7", "--duty", "0.5", "--sleep", "0.001", "--max-latency", "1000")
    run("--to", target, "--buckets", MOVED, *args)
    throttles = {throttle for throttle, _pause in pauses}
    assert throttles == {Throttle(sleep=0.001, duty=0.5, max_latency=1.0)}
    # A pause after every batch of 7 rows read, in the copy (entities alone: more than
    # moving / 7 batches, as the walk reads every row of the source) and the deletion.
    assert len(pauses) > 2 * (moving // 7)
    assert all(pause > 0.001 for _throttle, pause in pauses)
    assert_moved_and_exact(made, target)


def test_a_second_mover_while_one_runs_is_refused_with_nothing_changed():
    from schemaless_store.guards.server_lock import ServerLock
    from schemaless_store.moves.decide import MOVER_LOCK

    populate(10)
    _source, target = source_and_target()
    running = ServerLock(MOVER_LOCK, "default")  # what a running mover holds
    assert running.acquire()
    try:
        for args in (["--to", target, "--buckets", MOVED], ["--abort"]):
            with pytest.raises(CommandError, match="another movebuckets is running"):
                run(*args)
        assert "Dry run" in run("--to", target, "--buckets", MOVED, "--dry-run")
    finally:
        running.release()
    assert BucketMove.objects.count() == 0
    assert bucket_map.refresh().version == 1
    assert "done: 0-299 now on" in run("--to", target, "--buckets", MOVED)


def test_a_second_move_waits_for_the_first_and_an_unflipped_move_can_be_aborted(monkeypatch):
    made = populate(30)
    source, target = source_and_target()
    from schemaless_store.moves.mover import Mover

    def crash(self):
        raise RuntimeError("killed before the fence")

    monkeypatch.setattr(Mover, "catch_up", crash)
    with pytest.raises(RuntimeError):
        run("--to", target, "--buckets", MOVED)
    monkeypatch.undo()
    assert BucketMove.objects.get().phase == "catching up"
    out = io.StringIO()
    call_command("shardmap", stdout=out)
    assert "Moving now: buckets 0-299." in out.getvalue()
    assert f"in progress: buckets 0-299 to {target}, catching up" in out.getvalue()
    number = BucketMove.objects.get().pk
    with pytest.raises(CommandError, match=f"move #{number} of buckets 0-299 to .* is catching up"):
        run("--to", target, "--buckets", "500-600")
    text = run("--abort")
    assert f"Move #{number} aborted: 0-299 stay with {source}." in text
    assert BucketMove.objects.get().phase == "aborted"
    assert not capture.installed(source)
    assert bucket_table.states(target, list(range(300))) == {}
    # Nothing moved: every entity is where it was, once.
    assert {k: v for k, v in ids_per_shard().items()} == {
        i.bytes: [
            source if bucket_map.bucket_for(i.bytes) in MOVED_SET else bucket_map.alias_for(i.bytes)
        ]
        for i in made
    }
    assert_exact()


def move_state() -> tuple[str, str] | None:
    """The move's phase and checkpoints as this process reads them now (None: no move yet)."""
    child.reconnect()  # the fence may have ended this process's connections
    move = BucketMove.objects.first()
    return None if move is None else (move.phase, repr(sorted(move.checkpoints.items())))


def test_a_mover_killed_at_any_moment_resumes_when_run_again():
    made = populate(80)
    _source, target = source_and_target()
    args = ("movebuckets", "--to", target, "--buckets", MOVED, "--batch", "5", "--sleep", "0.01")
    interrupted = []
    # Each run is killed a little later after it is seen to have moved the move on (a new phase
    # or checkpoint): fixed delays from the start killed a child still importing Django on a
    # loaded machine, before it had done anything.
    for after_progress in (0.0, 0.2, 0.5, 1.0):
        before = move_state()
        process = child.spawn("manage", *args)
        deadline = time.monotonic() + 60
        while move_state() == before and process.poll() is None:
            assert time.monotonic() < deadline, "the mover made no progress in 60 s"
            time.sleep(0.02)
        time.sleep(after_progress)
        process.send_signal(signal.SIGKILL)
        process.wait()
        move = BucketMove.objects.first()
        if move is not None and move.phase == "done":
            break
        interrupted.append(None if move is None else move.phase)
    assert any(phase is not None for phase in interrupted), interrupted
    done = child.manage(*args)
    assert done.returncode == 0, done.stderr
    assert BucketMove.objects.get().phase == "done"
    assert_moved_and_exact(made, target)


def test_a_copy_stopped_mid_table_resumes_from_its_last_saved_checkpoint(monkeypatch):
    from schemaless_store.moves import copying

    made = populate(60)
    _source, target = source_and_target()
    monkeypatch.setattr(copying, "CHECKPOINT_EVERY", 0.0)  # saved after every batch
    real_write, written = copying.write, []

    def write(alias, table, rows):
        written.append(table.name)
        if written.count("entities") == 4:
            raise RuntimeError("stopped mid-copy")
        real_write(alias, table, rows)

    monkeypatch.setattr(copying, "write", write)
    with pytest.raises(RuntimeError, match="stopped mid-copy"):
        run("--to", target, "--buckets", MOVED, "--batch", "5")
    move = BucketMove.objects.get()
    assert move.phase == "copying"
    (mark,) = [name for name in move.checkpoints if name.endswith("/entities")]
    assert move.checkpoints[mark] not in (None, "done")  # a walk key, three batches in
    monkeypatch.setattr(copying, "write", real_write)
    assert "Resuming move" in run("--to", target, "--buckets", MOVED, "--batch", "5")
    assert BucketMove.objects.get().phase == "done"
    assert_moved_and_exact(made, target)


def test_a_reader_still_routing_by_the_map_before_the_flip_reads_the_new_owner(monkeypatch):
    """A process whose map shows the buckets moving but not flipped reads the old shard; the
    shard's own table says the buckets are gone, and the read runs again by the new map."""
    source, target = source_and_target()
    entity = Entity.objects.create(id=buckets.id_in_bucket(5), title="before", user_id=b"r" * 16)
    from schemaless_store.moves import plan
    from schemaless_store.moves.mover import Mover

    move = plan.start(plan.plan(target, list(range(300))))
    mover = Mover(move)
    mover.copy()
    marked = bucket_map.refresh()
    assert 5 in marked.moving and marked.owners[5] == source
    mover.catch_up()  # fences, replays, flips
    entity["title"] = "after"
    entity.save()  # on the target now
    assert entity.shard == target
    # This process goes back to the map it had before the flip, fresh for an hour.
    stale = dataclasses.replace(marked, fetched_at=time.monotonic(), max_age=3600.0)
    monkeypatch.setattr(bucket_map, "_cached", stale)
    assert Entity.objects.get(id=entity.id)["title"] == "after"
    assert bucket_map.current().version > stale.version  # the shard's refusal made it read again
    monkeypatch.setattr(bucket_map, "_cached", stale)
    assert [e["title"] for e in Entity.objects.filter_index(user_id=b"r" * 16)] == ["after"]
    monkeypatch.setattr(bucket_map, "_cached", stale)
    assert [e["title"] for e in Entity.objects.all() if e.id == entity.id] == ["after"]
    monkeypatch.setattr(bucket_map, "_cached", stale)
    assert Entity.objects.all().count() == 1
    mover.run()
    assert BucketMove.objects.get().phase == "done"


def test_a_feed_consumer_sees_every_change_once_across_a_move():
    from schemaless_store.cells import feed

    _source, target = source_and_target()
    rows = [buckets.id_in_bucket(n) for n in (1, 2, 3)] + [uuid.uuid4() for _ in range(3)]
    positions = {alias: feed.head(alias) for alias in shards.shard_aliases()}
    for row_key in rows:
        Cell.objects.put(row_key, "status", {"n": 1})
    seen: list[tuple[uuid.UUID, str, int]] = []

    def consume() -> None:
        for alias in positions:
            while True:
                page = feed.changes(alias, positions[alias], 100)
                seen.extend((c.row_key, c.column_name, c.ref_key) for c in page.changes)
                if page.position == positions[alias]:
                    break
                positions[alias] = page.position

    raw = {**settings.SCHEMALESS, "MAP_MAX_AGE": 0.05, "FEED_GAP_GRACE": 0}
    with override_settings(SCHEMALESS=raw):  # every write is committed when it reads
        consume()
    for row_key in rows[:2]:
        Cell.objects.put(row_key, "status", {"n": 2})  # on the source, not consumed yet
    run("--to", target, "--buckets", MOVED)
    for row_key in rows:
        Cell.objects.put(row_key, "status", {"n": 3})  # moved rows' on the target
    with override_settings(SCHEMALESS=raw):
        consume()
    expected = [(r, "status", 1) for r in rows] + [(r, "status", 2) for r in rows[:2]]
    expected += [(r, "status", 3) for r in rows[:2]] + [(r, "status", 2) for r in rows[2:]]
    assert sorted(seen) == sorted(expected)
    assert len(seen) == len(set(seen))
    # The source keeps its cells of the moved rows (its feed's record); reads go to the owner.
    assert [c.ref_key for c in Cell.objects.versions(rows[0], "status")] == [1, 2, 3]


def test_a_write_begun_before_the_fence_and_committing_after_the_flip_lands_on_the_owner(
    monkeypatch,
):
    """A writer reads its connection's snapshot ("this shard serves the bucket") and writes the
    row, and is held before its commit while the move fences, flips, verifies and deletes the
    old copies. The fence ends its connection (docs/design.md#the-fence), so its transaction
    cannot commit on the old copy: the store runs the write again on a fresh connection, is
    refused there, and writes on the new owner. The caller's save returns, and the value is
    there. (MySQL: on SQLite writes are serialized with the fence, which waits for them.)"""
    if connections["shard_0"].vendor != "mysql":
        pytest.skip("MySQL's fence; SQLite's fence waits for the write under way")
    entity_id = buckets.id_in_bucket(7)
    Entity.objects.create(id=entity_id, user_id=b"\x01" * 16, title="before")
    _source, target = source_and_target()
    holding, release = threading.Event(), threading.Event()
    outcome: list[object] = []
    add_index_rows = protocol.Write.add_index_rows

    def held(self: protocol.Write) -> None:
        add_index_rows(self)
        if threading.current_thread() is thread and not holding.is_set():
            holding.set()  # the row is written, the commit not yet sent
            assert release.wait(60)

    def save() -> None:
        try:
            entity = Entity.objects.get(id=entity_id)
            entity["title"] = "after"
            entity.save()
            outcome.append("saved")
        except Exception as exc:  # reported below
            outcome.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=save)
    catch_up = Mover.catch_up

    def writer_held_first(self: Mover) -> None:
        # After the triggers are in (their install waits for open transactions): the writer
        # takes its snapshot and writes, and is held through the fence and the flip.
        thread.start()
        assert holding.wait(30)
        catch_up(self)

    monkeypatch.setattr(protocol.Write, "add_index_rows", held)
    monkeypatch.setattr(Mover, "catch_up", writer_held_first)
    try:
        run("--to", target, "--buckets", MOVED)
    finally:
        release.set()
        if thread.is_alive() or thread.ident is not None:
            thread.join(60)
    assert outcome == ["saved"], outcome
    assert_moved_and_exact({entity_id: {"user_id": b"\x01" * 16, "title": "after"}}, target)


def _link_in_moved_buckets(avoid: str = "") -> str:
    """A link whose ``index_link`` row lives in a moved bucket."""
    from schemaless_store.config.indexes import registry

    index = registry.get("index_link")
    for number in range(10_000):
        link = f"https://example.com/moved/{number}"
        (values,) = index.rows_for({"link": link})
        bucket = bucket_map.bucket_for(index.routing_key(values[index.shard_position]))
        if bucket in MOVED_SET and link != avoid:
            return link
    raise AssertionError("no link in the moved buckets")


def _staying_with_a_moving_row() -> tuple[uuid.UUID, uuid.UUID]:
    """Two entities that stay on the source (their ids' buckets do not move), each with an
    index row in a moved bucket (its ``link``'s); the second is kept."""
    source, _target = source_and_target()
    staying, kept = buckets.id_in_bucket(1000), buckets.id_in_bucket(1001)
    assert bucket_map.alias_for(staying.bytes) == bucket_map.alias_for(kept.bytes) == source
    link = _link_in_moved_buckets()
    Entity.objects.create(id=staying, link=link, title="deleted")
    other = _link_in_moved_buckets(avoid=link)
    Entity.objects.create(id=kept, link=other, title="kept", user_id=b"k" * 16)
    return staying, kept


def test_a_delete_between_the_last_replay_and_the_flip_removes_the_index_row_on_the_owner(
    monkeypatch,
):
    """The interleaving behind a rare failure of the writers' test above (an extra
    ``index_link`` row on the target): an entity that stays on the source has an index row in
    a moved bucket. It is deleted while the move is fenced, after the last replay of the log
    and before the flip. Its own delete is the source's to make (its bucket does not move); its
    index row's removal (step 5) goes where the map says, the source, which is fenced for that
    bucket. Taken there, the removal would be logged but never replayed, and the target's copy
    would stay. The source refuses it instead, and it is made on the owner once the move
    flips: nothing is left behind (I3 without a cleaner pass)."""
    staying, kept = _staying_with_a_moving_row()
    _source, target = source_and_target()
    real_snapshot = mover.snapshot
    real_await = bucket_map.await_new_owner
    waiting = threading.Event()
    outcome: list[object] = []

    def await_new_owner(alias: str, moved: set[int]) -> None:
        waiting.set()  # refused: it waits for the flip
        real_await(alias, moved)

    def delete() -> None:
        try:
            outcome.append(Entity.objects.get(id=staying).delete()[0])
        except Exception as exc:  # reported below
            outcome.append(exc)
        finally:
            waiting.set()
            connections.close_all()

    thread = threading.Thread(target=delete)

    def snapshot_after_a_delete(alias: str):  # type: ignore[no-untyped-def]
        # The last replay found nothing; the flip has not begun.
        thread.start()
        assert waiting.wait(30)
        return real_snapshot(alias)

    monkeypatch.setattr(bucket_map, "await_new_owner", await_new_owner)
    monkeypatch.setattr(mover, "snapshot", snapshot_after_a_delete)
    try:
        run("--to", target, "--buckets", MOVED)
    finally:
        thread.join(60)
    assert outcome == [1], outcome
    assert BucketMove.objects.get().phase == "done"
    assert_moved_and_exact({kept: {"title": "kept", "user_id": b"k" * 16}}, target)


def test_a_delete_routing_by_the_map_before_the_flip_removes_the_index_row_on_the_owner(
    monkeypatch,
):
    """The same removal made after the flip by a process whose map is still the one from
    before it (at most ``MAP_MAX_AGE`` old): the source, which has given the bucket away,
    refuses it, and it is made on the owner."""
    from schemaless_store.moves import plan

    staying, kept = _staying_with_a_moving_row()
    _source, target = source_and_target()
    move = plan.start(plan.plan(target, list(range(300))))
    moving = Mover(move)
    moving.copy()
    marked = bucket_map.refresh()
    entity = Entity.objects.get(id=staying)  # read before the flip
    moving.catch_up()  # fences, replays the log for the last time, flips
    # This process goes back to the map it had before the flip, fresh for an hour.
    stale = dataclasses.replace(marked, fetched_at=time.monotonic(), max_age=3600.0)
    monkeypatch.setattr(bucket_map, "_cached", stale)
    assert entity.delete()[0] == 1
    moving.run()
    assert BucketMove.objects.get().phase == "done"
    assert_moved_and_exact({kept: {"title": "kept", "user_id": b"k" * 16}}, target)

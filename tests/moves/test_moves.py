"""``movebuckets``: buckets move between the two shards while writers run (docs/resharding.md).

Afterwards every acknowledged write is there in its last state, every id is on exactly one
shard, index tables are exact (I3) and queries answer exactly; bad input changes nothing; a
mover killed with SIGKILL resumes; a move that has not flipped can be aborted.
"""

from __future__ import annotations

import contextlib
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
from django.core.management import CommandError, call_command
from django.db import connections

from schemaless_store.config.metadata import BucketMove
from schemaless_store.exceptions import NotOwner
from schemaless_store.guards.throttle import Throttle
from schemaless_store.models import Cell, Entity
from schemaless_store.moves import copying
from schemaless_store.moves.mover import Mover
from schemaless_store.tables import buckets as bucket_table
from schemaless_store.tables import move_log as capture
from schemaless_store.topology import bucket_map
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

"""``manage.py mapentities`` and ``schemaless_store.mapping.map_entities`` (issue 28, part 3):
no lost update under concurrent writers, index tables exact after, SIGKILL and resume without
applying the function twice, a function that raises, ``--where``, ``--dry-run``, deletes, a
bucket move mid-run, the lock per (function, shard). Runs on either backend."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
import uuid
from io import StringIO

import factory
import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from schemaless_store.guards.server_lock import ServerLock
from schemaless_store.mapping import map_entities, walk
from schemaless_store.models import Entity
from schemaless_store.tables import map_runs
from schemaless_store.topology import shards
from tests.support import STORE, child, mapfuncs
from tests.support.factories import NumberedFactory
from tests.support.invariants import assert_exact, committed_entities
from tests.support.mapping import fresh_runs

pytestmark = STORE


_fresh_runs = fresh_runs()


def make(count: int, **extra) -> list[uuid.UUID]:
    """``count`` entities numbered from 0, their links alternately https://a and https://b."""
    links = factory.Iterator(["https://a", "https://b"])
    return [e.id for e in NumberedFactory.create_batch(count, link=links, tags=["t"], **extra)]


def stored() -> dict[uuid.UUID, dict]:
    return {uuid.UUID(bytes=k): v for k, v in committed_entities().items()}


def test_a_run_renames_a_property_everywhere_and_keeps_the_indexes_exact():
    ids = make(40)
    summary = map_entities("tests.support.mapfuncs.rename_link", batch_size=7)
    assert summary.ok, summary.problems
    assert (summary.seen, summary.changed, summary.failed) == (40, 40, 0)
    for props in stored().values():
        assert "link" not in props and props["url"].startswith("https://") and props["mapped"]
    assert not list(Entity.objects.filter_index(link="https://a"))
    assert len(list(Entity.objects.filter_index(tags="t"))) == len(ids)
    assert_exact()
    again = map_entities("tests.support.mapfuncs.rename_link")  # done: nothing walked again
    assert again.ok and again.seen == 0


def test_writers_updating_the_same_entities_lose_no_update():
    ids = make(30)
    added = {i: 0 for i in ids}
    guard = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []

    def bump(entity: Entity) -> None:
        entity["n"] += 1000

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                target = rng.choice(ids)
                Entity.objects.modify(target, bump, attempts=100)
                with guard:
                    added[target] += 1
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            connections.close_all()
            shards.close_index_connections()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.2)
        summary = map_entities("tests.support.mapfuncs.rename_link", batch_size=3, sleep=0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors and summary.ok, (errors, summary.problems)
    assert sum(added.values()) > 0
    start = {i: n for n, i in enumerate(ids)}
    for entity_id, props in stored().items():
        assert props["n"] == start[entity_id] + 1000 * added[entity_id]  # every bump kept
        assert "link" not in props and props["mapped"]  # the mapping kept too
    assert summary.changed == 30
    assert_exact()


def test_a_kill_between_a_batch_commit_and_its_checkpoint_applies_nothing_twice(monkeypatch):
    make(20)

    def dies_after_first_commit(point):
        raise RuntimeError("killed before the checkpoint")

    monkeypatch.setattr(walk, "save_checkpoint", dies_after_first_commit)
    first = map_entities("tests.support.mapfuncs.add_one", batch_size=4, shards=["shard_0"])
    monkeypatch.undo()
    assert not first.ok and first.changed > 0  # a batch was saved, its checkpoint was not
    done = map_entities("tests.support.mapfuncs.add_one", batch_size=4)
    assert done.ok, done.problems
    assert done.skipped == first.changed
    assert {props["mapped"] for props in stored().values()} == {1}


@pytest.mark.slow
def test_sigkill_then_rerun_resumes_and_applies_the_function_once_per_entity():
    make(120)
    process = child.spawn(
        "manage",
        "mapentities",
        "tests.support.mapfuncs.add_one",
        "--batch-size",
        "5",
        "--sleep",
        "0.05",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        mapped = sum(1 for props in stored().values() if "mapped" in props)
        if mapped >= 20:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    partly = sum(1 for props in stored().values() if "mapped" in props)
    assert 0 < partly < 120
    summary = map_entities("tests.support.mapfuncs.add_one", batch_size=5)
    assert summary.ok, summary.problems
    assert {props["mapped"] for props in stored().values()} == {1}
    assert summary.changed == 120 - partly  # exactly the ones the killed run had not saved
    assert len(mapfuncs.CALLS["add_one"]) < 120  # resumed, not started over
    assert_exact()


def test_a_function_that_raises_is_recorded_and_a_rerun_retries_only_those():
    good = make(10)
    bad = [e.id for e in Entity.objects.bulk_put([{"n": 100 + n, "bad": True} for n in range(3)])]
    with pytest.raises(CommandError) as caught:
        call_command(
            "mapentities", "tests.support.mapfuncs.explode", stdout=StringIO(), stderr=StringIO()
        )
    assert "3 entities failed" in str(caught.value)
    now = stored()
    assert all(now[i]["mapped"] == 1 for i in good) and not any("mapped" in now[i] for i in bad)
    mapfuncs.CALLS.clear()
    mapfuncs.BROKEN["on"] = False
    out, err = StringIO(), StringIO()
    call_command("mapentities", "tests.support.mapfuncs.explode", stdout=out, stderr=err)
    assert sorted(mapfuncs.CALLS["explode"]) == sorted(bad)  # only the failed ones again
    assert all(props["mapped"] == 1 for props in stored().values())


def test_failures_are_listed_with_their_messages():
    Entity.objects.bulk_put([{"n": 7, "bad": True}])
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("mapentities", "tests.support.mapfuncs.explode", stdout=StringIO(), stderr=err)
    assert "ValueError: cannot map 7" in err.getvalue()


def test_where_limits_the_run_to_what_filter_index_finds():
    make(20)
    out = StringIO()
    call_command(
        "mapentities", "tests.support.mapfuncs.add_one", "--where", "link=https://a", stdout=out
    )
    for props in stored().values():
        assert ("mapped" in props) == (props["link"] == "https://a")
    assert "10 seen, 10 changed" in out.getvalue()


def test_dry_run_counts_shows_three_examples_and_writes_nothing():
    make(8)
    before = stored()
    out = StringIO()
    call_command("mapentities", "tests.support.mapfuncs.rename_link", "--dry-run", stdout=out)
    text = out.getvalue()
    assert text.count("  before: ") == 3 and text.count("  after:  ") == 3
    assert '"url": "https://' in text and "8 would change" in text
    assert stored() == before
    assert not map_entities("tests.support.mapfuncs.noop", dry_run=True).changed


def test_the_function_may_delete_and_unchanged_entities_are_not_written():
    keep = make(5)
    junk = [e.id for e in Entity.objects.bulk_put([{"junk": True, "tags": ["t"]}] * 3)]
    before = {e.id: e.row_updated for e in Entity.objects.all()}
    summary = map_entities("tests.support.mapfuncs.drop_junk")
    assert summary.ok and (summary.seen, summary.changed, summary.deleted) == (8, 0, 3)
    assert set(stored()) == set(keep) and not set(junk) & set(stored())
    assert {e.id: e.row_updated for e in Entity.objects.all()} == {i: before[i] for i in keep}
    assert_exact()


def test_a_map_change_mid_run_stops_with_a_clear_message_and_a_rerun_finishes():
    make(30)
    mapfuncs.MOVE_AT["call"] = 5
    summary = map_entities("tests.support.mapfuncs.move_midway", batch_size=4)
    assert not summary.ok
    assert any("the shard map changed" in p for p in summary.problems), summary.problems
    done = map_entities("tests.support.mapfuncs.move_midway", batch_size=4)
    assert done.ok, done.problems
    assert {props["mapped"] for props in stored().values()} == {1}


def test_one_run_per_function_and_shard():
    make(6)
    run = map_runs.run_key("tests.support.mapfuncs.add_one")
    lock = ServerLock(f"map-{run[:20]}", "shard_0")
    assert lock.acquire()
    try:
        summary = map_entities("tests.support.mapfuncs.add_one")
    finally:
        lock.release()
    assert summary.shards["shard_0"] == "skipped" and not summary.ok
    assert any("another mapentities run" in p for p in summary.problems)
    assert map_entities("tests.support.mapfuncs.add_one").ok
    assert {props["mapped"] for props in stored().values()} == {1}


@pytest.mark.slow
def test_a_real_bucket_move_mid_run_stops_it_and_the_rerun_sees_every_entity_once(buckets_restored):
    """movebuckets flips buckets 0-299 while a run is inside its function: the run stops;
    run again, it finds the moved rows (new added_ids on the new shard) and skips those it had
    saved, wherever their note of it is: every entity mapped exactly once."""
    from schemaless_store.topology import bucket_map
    from tests.support import buckets

    ids = []
    for number in range(60):
        entity_id = buckets.id_in_bucket(number % 300) if number % 2 else uuid.uuid4()
        ids.append(Entity.objects.create(id=entity_id, n=number, tags=["t"]).id)
    source = bucket_map.current().owners[0]
    target = buckets.other_alias(source)
    reached, gate = threading.Event(), threading.Event()
    mapfuncs.PAUSE.update(at=9, reached=reached, gate=gate)
    first = []
    runner = threading.Thread(
        target=lambda: first.append(
            map_entities("tests.support.mapfuncs.pause_midway", batch_size=4, shards=[source])
        )
    )
    runner.start()
    try:
        assert reached.wait(60)
        call_command(
            "movebuckets",
            "--to",
            target,
            "--buckets",
            "0-299",
            stdout=StringIO(),
            stderr=StringIO(),
        )
    finally:
        gate.set()
        runner.join(timeout=120)
    assert not first[0].ok
    assert any("the shard map changed" in p for p in first[0].problems), first[0].problems
    rest = map_entities("tests.support.mapfuncs.pause_midway", batch_size=4)
    assert rest.ok, rest.problems
    assert rest.skipped > 0  # moved rows this run had saved before the move
    now = stored()
    assert set(now) == set(ids)
    assert {props["mapped"] for props in now.values()} == {1}
    assert_exact()


def test_the_throttle_options_reach_every_batch(monkeypatch):
    from schemaless_store.guards.throttle import Throttle

    make(10)
    seen = []

    def after(self, began, wait=time.sleep, probe=None):
        seen.append((self.sleep, self.duty, self.max_latency))
        return 0.0

    monkeypatch.setattr(Throttle, "after", after)
    args = ["--batch-size", "3", "--sleep", "0.01", "--duty", "0.5", "--max-latency", "40"]
    call_command("mapentities", "tests.support.mapfuncs.add_one", *args, stdout=StringIO())
    assert set(seen) == {(0.01, 0.5, 0.04)}
    assert len(seen) >= 10 // 3  # once per batch, on every shard


@pytest.mark.slow
def test_sigterm_finishes_the_batch_and_a_rerun_resumes():
    make(60)
    process = child.spawn(
        "manage",
        "mapentities",
        "tests.support.mapfuncs.add_one",
        "--batch-size",
        "3",
        "--sleep",
        "0.1",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if sum(1 for props in stored().values() if "mapped" in props) >= 6:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=60)
    assert process.returncode != 0 and "interrupted on" in err, err
    partly = sum(1 for props in stored().values() if "mapped" in props)
    assert 0 < partly < 60
    summary = map_entities("tests.support.mapfuncs.add_one")
    assert summary.ok and summary.changed == 60 - partly
    assert {props["mapped"] for props in stored().values()} == {1}

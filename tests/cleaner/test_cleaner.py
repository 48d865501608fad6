from __future__ import annotations

import contextlib
import io
import itertools
import logging
import random
import re
import signal
import subprocess
import threading
import time
import uuid
from unittest import mock

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connections
from django.db.backends.signals import connection_created

from schemaless_store import conf, lifecycle
from schemaless_store.cleaner import Cleaner, Summary
from schemaless_store.exceptions import IndexValueError, ShardUnavailable
from schemaless_store.indexes import registry
from schemaless_store.management.commands import runcleaner
from schemaless_store.models import CleanerCheckpoint, CleanerPass, Entity
from schemaless_store.topology import bucket_map, shards
from schemaless_store.topology.server_lock import ServerLock, lock_name
from tests.support import STORE, child
from tests.support.factories import PostFactory
from tests.support.invariants import assert_exact
from tests.support.raw import index_rows, insert_index_row

pytestmark = STORE

PUBLISHED = "index_cleaner_published"


def fixed_after_backfill(name: str) -> int:
    """Rows the repair and sweep passes had to fix: none if the backfill itself was exact."""
    return sum(
        p.rows_inserted + p.stale_removed + p.orphans_removed
        for p in CleanerPass.objects.filter(index_name=name, kind__in=["repair", "sweep"])
    )


def state(name: str) -> str | None:
    return lifecycle.states(refresh=True).get(name)


def passes(**filters) -> list[CleanerPass]:
    return list(CleanerPass.objects.filter(**filters).order_by("id"))


def raw_delete(table: str, entity_id: bytes) -> None:
    for alias in shards.shard_aliases():
        conn = connections[alias]
        with conn.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {conn.ops.quote_name(table)} WHERE entity_id = %s", [entity_id]
            )


def raw_set_body(entity: Entity, body: bytes) -> None:
    with connections[entity.shard].cursor() as cursor:
        cursor.execute("UPDATE entities SET body = %s WHERE id = %s", [body, entity.id.bytes])


# --- backfill --------------------------------------------------------------------------------


def test_backfill_indexes_existing_entities_then_the_index_is_ready(published, posts):
    assert state(PUBLISHED) == "building"
    assert index_rows(PUBLISHED) == []

    summary = Cleaner(indexes=[PUBLISHED], once=True, batch_size=30).run()

    assert state(PUBLISHED) == "ready"
    assert_exact([published])
    assert summary.total("inserted") == len(posts)
    for checkpoint in CleanerCheckpoint.objects.filter(index_name=PUBLISHED):
        assert checkpoint.done
        assert checkpoint.entities_done == checkpoint.entities_total
    kinds = {(p.kind, p.shard, p.status) for p in passes(index_name=PUBLISHED)}
    assert kinds == {
        (kind, alias, "done")
        for kind in ("backfill", "repair", "sweep")
        for alias in shards.shard_aliases()
    }
    backfilled = sum(p.entities_scanned for p in passes(index_name=PUBLISHED, kind="backfill"))
    assert backfilled == len(posts)
    post = posts[7]
    found = Entity.objects.filter_index(published=post["published"])
    assert [e.id for e in found] == [post.id]


def test_a_pass_stops_before_its_next_batch_once_its_lock_is_lost(published, posts, monkeypatch):
    """A Galera lease can be lost under a running pass (topology/server_lock.py): the pass stops
    before its next batch, failed, and the index stays building for the next round."""
    from schemaless_store.topology import server_lock as lock_module

    batches = []
    held = lock_module.ServerLock.held

    def held_for_one_batch(self):
        return held.fget(self) and len(batches) < 1

    monkeypatch.setattr(lock_module.ServerLock, "held", property(held_for_one_batch))
    cleaner = Cleaner(indexes=[PUBLISHED], once=True, batch_size=5)
    original = cleaner.batches

    def counting(fetch, result):
        for batch in original(fetch, result):
            batches.append(len(batch))
            yield batch

    monkeypatch.setattr(cleaner, "batches", counting)
    summary = cleaner.run()
    failed = [p for p in passes(index_name=PUBLISHED) if p.status == "failed"]
    assert failed and all("lost" in p.message for p in failed)
    assert len(batches) == 1 and summary.total("inserted") <= 5
    assert state(PUBLISHED) == "building"


def test_entities_nobody_changes_are_not_re_checked(published, posts, monkeypatch):
    """The version a batch was read at (added_id, updated) matches its re-read when nothing
    changed: only entities changed in between go to the locked re-check (remove_stale)."""
    from schemaless_store.indexes import ENTITIES
    from schemaless_store.writes import protocol

    rechecked: list[int] = []
    remove_stale = protocol.remove_stale

    def counting(alias, candidates, source=ENTITIES):
        rechecked.append(len(candidates))
        return remove_stale(alias, candidates, source)

    monkeypatch.setattr(protocol, "remove_stale", counting)
    raw_delete("index_link", posts[3].id.bytes)  # one row for the repair pass to put back
    summary = Cleaner(indexes=[PUBLISHED, "index_link"], once=True, batch_size=40).run()

    assert summary.total("inserted") == len(posts) + 1
    assert rechecked == []
    assert_exact()


class BackfillThenCheck(Cleaner):
    """Runs ``after_backfill`` once the backfill is over, before the first repair pass."""

    def __init__(self, after_backfill, **options) -> None:
        super().__init__(**options)
        self.after_backfill = after_backfill

    def run_passes(self, index, alias, kinds):
        if "backfill" not in kinds and self.after_backfill is not None:
            self.after_backfill, after_backfill = None, self.after_backfill
            after_backfill()
        return super().run_passes(index, alias, kinds)


def test_backfill_while_a_writer_keeps_writing_is_exact(published, posts):
    stop = threading.Event()
    failures: list[BaseException] = []
    writes = [0]

    def writer() -> None:
        rng = random.Random(3)
        mine = list(posts)
        try:
            while not stop.is_set():
                action = rng.random()
                if action < 0.6:
                    entity = Entity.objects.get(id=rng.choice(mine).id)
                    entity["published"] = rng.randrange(1000)
                    entity.save()
                elif action < 0.8:
                    mine.append(PostFactory.create(published=rng.randrange(1000)))
                elif len(mine) > 50:
                    mine.pop(rng.randrange(len(mine))).delete()
                writes[0] += 1
        except BaseException as exc:
            failures.append(exc)
        finally:
            shards.close_index_connections()
            connections.close_all()

    thread = threading.Thread(target=writer)
    after: dict[str, object] = {}

    def stop_writer_and_check() -> None:
        stop.set()
        thread.join()
        after["state"] = state(PUBLISHED)
        try:
            assert_exact()  # every index, the new one included: no repair has run yet
        except AssertionError as exc:
            after["inexact"] = exc

    thread.start()
    try:
        cleaner = BackfillThenCheck(
            stop_writer_and_check, indexes=[PUBLISHED], once=True, batch_size=10, sleep=0.02
        )
        cleaner.run()
    finally:
        stop.set()
        thread.join()
    assert not failures, failures
    assert writes[0] > 20  # the writer really ran during the backfill
    assert after["state"] == "ready"
    assert "inexact" not in after, after.get("inexact")
    assert fixed_after_backfill(PUBLISHED) == 0  # so the repair and sweep found nothing
    assert_exact()


class InterleavingCleaner(Cleaner):
    """Runs ``meanwhile(rows)`` once, at one point of the cleaner's writes: a writer that gets
    in exactly there, deterministically. ``rows`` are ``(index, values, entity_id)``.

    - ``at="insert"``: between reading a batch and inserting the rows it implies;
    - ``at="removal"``: between finding rows stale (by the batch's unlocked read) and the
      removal that re-checks them under the entity's lock;
    - ``at="recheck"``: inside that removal, between its locked read of the entity and its
      delete. ``meanwhile`` runs on another thread there (a writer waits for the lock): the
      cleaner gives it a second to get past the removal if it can, then goes on; the thread
      is joined when the pass is over.

    ``ran`` says whether ``meanwhile`` ran (a test asserts it: a hook that no longer fires
    would make its test prove nothing)."""

    def __init__(self, meanwhile, at: str = "insert", **options) -> None:
        super().__init__(**options)
        self.meanwhile = meanwhile
        self.at = at
        self.ran = False
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []

    def _fire(self, rows) -> bool:
        if self.ran or not rows:
            return False
        self.ran = True
        if self.at != "recheck":
            self.meanwhile(rows)
            return True

        def other_thread() -> None:
            try:
                self.meanwhile(rows)
            except BaseException as exc:  # reported by the test
                self.errors.append(exc)
            finally:
                connections.close_all()

        thread = threading.Thread(target=other_thread)
        thread.start()
        self._threads.append(thread)
        thread.join(timeout=1.0)
        return True

    def run_passes(self, index, alias, kinds):
        from schemaless_store.cleaner import repairs
        from schemaless_store.tables import entities as entity_table
        from schemaless_store.writes import index_writes, protocol

        real_insert, real_remove = repairs.insert, protocol.remove_stale
        real_lock, real_delete = entity_table.lock, index_writes.delete
        cleaner_thread = threading.get_ident()
        removing: list[list] = []  # the rows of the removal under way on the cleaner's thread

        def insert(index, rows, result):
            if self.at == "insert":
                self._fire(rows)
            return real_insert(index, rows, result)

        def remove_stale(alias, candidates, source=index.source):
            rows = [(i, v, key) for key, found in candidates.items() for i, v in found]
            mine = threading.get_ident() == cleaner_thread
            if mine and self.at == "removal":
                self._fire(rows)
            if mine:
                removing.append(rows)
            try:
                return real_remove(alias, candidates, source)
            finally:
                if mine:
                    removing.pop()

        def lock(*args, **kwargs):
            found = real_lock(*args, **kwargs)
            if self.at == "recheck" and removing and threading.get_ident() == cleaner_thread:
                self._fire(removing[-1])
            return found

        def delete(rows):
            rows = list(rows)
            mine = threading.get_ident() == cleaner_thread
            if mine and not removing and self.at == "removal":
                self._fire(rows)  # stale rows deleted without a removal that re-checks them
            return real_delete(rows)

        with contextlib.ExitStack() as patches:
            patches.enter_context(mock.patch.object(repairs, "insert", insert))
            patches.enter_context(mock.patch.object(protocol, "remove_stale", remove_stale))
            patches.enter_context(mock.patch.object(entity_table, "lock", lock))
            patches.enter_context(mock.patch.object(index_writes, "delete", delete))
            try:
                return super().run_passes(index, alias, kinds)
            finally:
                for thread in self._threads:
                    thread.join(timeout=60)


@pytest.mark.parametrize("change", ["update", "delete"])
def test_backfill_of_an_entity_changed_between_read_and_insert_is_exact(published, posts, change):
    def writer(rows) -> None:
        entity = Entity.objects.get(id=uuid.UUID(bytes=rows[0][2]))
        if change == "delete":
            entity.delete()
        else:
            entity["published"] = -1
            entity.save()  # it removes the old row, which the cleaner is about to insert

    cleaner = InterleavingCleaner(writer, indexes=[PUBLISHED], once=True, batch_size=50)
    cleaner.run()

    assert cleaner.ran
    assert_exact([published])
    assert fixed_after_backfill(PUBLISHED) == 0


def test_repair_of_an_entity_changed_between_read_and_insert_is_exact(posts):
    target = posts[0]
    raw_delete("index_link", target.id.bytes)

    def writer(rows) -> None:
        entity = Entity.objects.get(id=target.id)
        entity["link"] = "https://example.com/moved"
        entity.save()

    cleaner = InterleavingCleaner(writer, indexes=["index_link"], shards=[target.shard], once=True)
    cleaner.run()

    assert cleaner.ran
    assert_exact()
    sweeps = passes(index_name="index_link", kind="sweep")
    assert sum(p.stale_removed + p.orphans_removed for p in sweeps) == 0  # repair was exact


@pytest.mark.parametrize("at", ["removal", "recheck"])
@pytest.mark.parametrize("kind", ["repair", "sweep"])
def test_a_stale_row_whose_value_is_put_back_before_its_removal_is_kept(posts, kind, at):
    """The pass finds a row stale; a writer gives the entity that value again before the row
    is deleted: before the removal's re-check (``removal``), or between the re-check's read
    and its delete (``recheck``, the writer on its own connection). The row must stay, as
    the entity implies it again. A removal that trusted the pass's unlocked read, or a
    re-check that read without the entity's lock, deletes it."""
    entity = posts[4]
    home, row = plant_stale_link(entity)
    gone = "https://example.com/gone"  # the planted row's value
    link = registry.get("index_link")
    before = entity["link"]

    def writer(rows) -> None:
        assert [(i.name, v, e) for i, v, e in rows] == [("index_link", row[:1], row[1])]
        again = Entity.objects.get(id=entity.id)
        again["link"] = gone
        again.save()

    alias = entity.shard if kind == "repair" else home
    cleaner = InterleavingCleaner(writer, at, indexes=["index_link"], shards=[alias], once=True)
    (result,) = cleaner.run_passes(link, alias, [kind])

    assert cleaner.ran and not cleaner.errors, cleaner.errors
    assert result.status == "done"
    assert Entity.objects.get(id=entity.id)["link"] == gone
    assert row in index_rows("index_link", home)
    assert [e.id for e in Entity.objects.filter_index(link=gone)] == [entity.id]
    assert list(Entity.objects.filter_index(link=before)) == []
    assert_exact()


# --- repair and sweep ------------------------------------------------------------------------


def test_repair_inserts_missing_rows_and_removes_stale_ones(posts):
    link = registry.get("index_link")
    lost, changed = posts[0], posts[1]
    raw_delete("index_link", lost.id.bytes)
    # A stale row: a link the entity does not have (as if a writer died before removing it).
    old_link = link.column_value("link", "https://example.com/old")
    home = bucket_map.alias_for(link.routing_key(old_link))
    insert_index_row("index_link", home, (old_link, changed.id.bytes))

    summary = Cleaner(indexes=["index_link"], once=True, batch_size=50).run()

    assert_exact()
    assert summary.total("inserted") == 1
    assert summary.total("stale_removed") == 1
    repairs = passes(index_name="index_link", kind="repair")
    assert sum(p.rows_inserted for p in repairs) == 1
    assert {p.status for p in repairs} == {"done"}


def plant_stale_link(entity: Entity) -> tuple[str, tuple]:
    """A row of index_link the entity does not imply (as a writer that died before removing
    it leaves behind), on the shard the value routes to: that shard and the row."""
    link = registry.get("index_link")
    old_link = link.column_value("link", "https://example.com/gone")
    home = bucket_map.alias_for(link.routing_key(old_link))
    row = (old_link, entity.id.bytes)
    insert_index_row("index_link", home, row)
    assert row in index_rows("index_link", home)
    return home, row


def run_one_pass(kind: str, alias: str):
    """One pass of index_link on one shard, alone (no other pass runs)."""
    cleaner = Cleaner(indexes=["index_link"], shards=[alias], once=True, batch_size=50)
    (result,) = cleaner.run_passes(registry.get("index_link"), alias, [kind])
    assert (result.kind, result.shard, result.status) == (kind, alias, "done")
    return result


def test_the_repair_pass_alone_removes_a_stale_row(posts):
    entity = posts[4]
    home, row = plant_stale_link(entity)

    result = run_one_pass("repair", entity.shard)  # it walks the entities of that shard

    assert (result.stale_removed, result.orphans_removed, result.inserted) == (1, 0, 0)
    assert row not in index_rows("index_link", home)
    (recorded,) = passes(index_name="index_link")
    assert (recorded.kind, recorded.stale_removed) == ("repair", 1)
    assert_exact()


def test_the_sweep_pass_alone_removes_a_stale_row(posts):
    entity = posts[4]
    home, row = plant_stale_link(entity)

    result = run_one_pass("sweep", home)  # it walks the index rows of that shard

    assert (result.stale_removed, result.orphans_removed, result.inserted) == (1, 0, 0)
    assert row not in index_rows("index_link", home)
    (recorded,) = passes(index_name="index_link")
    assert (recorded.kind, recorded.stale_removed) == ("sweep", 1)
    assert_exact()


def test_repair_walks_every_entity_once_newest_first(monkeypatch):
    # Five bulk puts: five distinct "updated" values, each shared by 20 entities (ties).
    everyone = [e for _ in range(5) for e in PostFactory.create_batch(20)]
    lost = everyone[::9]
    for entity in lost:
        raw_delete("index_link", entity.id.bytes)
    walked: dict[str, list[tuple]] = {alias: [] for alias in shards.shard_aliases()}
    from schemaless_store.cleaner import passes

    original = passes._repair_entities

    def spy(index, alias, batch, result):
        walked[alias].extend(
            (updated, added_id, entity_id) for added_id, entity_id, updated, _ in batch
        )
        return original(index, alias, batch, result)

    monkeypatch.setattr(passes, "_repair_entities", spy)
    summary = Cleaner(indexes=["index_link"], once=True, batch_size=7).run()

    ids = [entity_id for rows in walked.values() for *_, entity_id in rows]
    assert sorted(ids) == sorted(e.id.bytes for e in everyone)  # each once
    for rows in walked.values():
        keys = [(updated, added_id) for updated, added_id, _ in rows]
        assert keys == sorted(keys, reverse=True)  # newest first, ties by added_id
    assert summary.total("inserted") == len(lost)
    assert_exact()


def test_sweep_removes_rows_whose_entity_is_gone(posts):
    user = registry.get("index_user_id")
    ghost = uuid.uuid4().bytes
    value = user.column_value("user_id", b"somebody")
    insert_index_row("index_user_id", bucket_map.alias_for(user.routing_key(value)), (value, ghost))

    summary = Cleaner(indexes=["index_user_id"], once=True).run()

    assert summary.total("orphans_removed") == 1
    assert sum(p.orphans_removed for p in passes(kind="sweep")) == 1
    assert_exact()


def test_sweep_walks_every_row_of_a_composite_index_once():
    # Three users, few distinct "published": ties on the leading columns of the primary key.
    Entity.objects.bulk_put(
        {"user_id": f"user{n % 3}", "published": n % 4, "title": str(n)} for n in range(60)
    )
    index = registry.get("index_user_published")
    for n in range(10):
        values = (index.column_value("user_id", f"user{n % 3}"), n % 4)
        home = bucket_map.alias_for(index.routing_key(values[0]))
        insert_index_row(index.name, home, (*values, uuid.uuid4().bytes))

    summary = Cleaner(indexes=[index.name], once=True, batch_size=7).run()

    sweeps = [p for p in summary.passes if p.kind == "sweep"]
    assert sum(p.scanned for p in sweeps) == 70  # every row once
    assert sum(p.orphans_removed for p in sweeps) == 10
    assert_exact()


def test_sweep_moves_rows_found_on_the_wrong_shard(posts):
    link = registry.get("index_link")
    post = posts[2]
    value = link.column_value("link", post["link"])
    home = bucket_map.alias_for(link.routing_key(value))
    elsewhere = next(a for a in shards.shard_aliases() if a != home)
    raw_delete("index_link", post.id.bytes)
    insert_index_row("index_link", elsewhere, (value, post.id.bytes))  # as after a bucket move

    Cleaner(indexes=["index_link"], once=True).run()

    assert_exact()


def test_corrupt_bodies_are_reported_and_skipped(published, posts):
    broken = posts[5]
    raw_set_body(broken, b"\x00not a body")

    summary = Cleaner(indexes=[PUBLISHED, "index_link"], once=True, batch_size=40).run()

    assert not summary.failed
    assert state(PUBLISHED) == "ready"
    assert summary.total("errors") >= 2  # at least the backfill and the repair saw it
    recorded = passes(index_name=PUBLISHED, kind="backfill", errors__gt=0)
    assert len(recorded) == 1
    assert broken.id.hex in recorded[0].message and "corrupt body" in recorded[0].message
    # Its rows in other indexes are left alone (we cannot know what it implies)...
    assert any(row[1] == broken.id.bytes for row in index_rows("index_link"))
    # ... and every other entity is indexed exactly.
    raw_delete("index_link", broken.id.bytes)
    broken.delete()
    assert_exact([published, registry.get("index_link")])


def test_a_write_does_not_fail_on_an_index_still_building(published, posts, caplog):
    """A value a ``building`` index cannot hold does not fail the write (that index serves no
    query yet): the write skips its row, the backfill reports the entity. Once the index is
    ready, the same write is refused as for any serving index."""
    with caplog.at_level(logging.WARNING, logger="schemaless_store.writes"):
        odd = Entity.objects.create(published="yesterday", link="https://example.com/odd")
    assert "index_cleaner_published is still building" in caplog.text
    assert Entity.objects.get(id=odd.id).body_properties()["published"] == "yesterday"
    assert not [row for row in index_rows(PUBLISHED) if odd.id.bytes in row]
    # The indexes that serve queries got their rows.
    assert [row for row in index_rows("index_link") if odd.id.bytes in row]

    summary = Cleaner(indexes=[PUBLISHED], once=True, batch_size=64).run()

    assert not summary.failed
    assert state(PUBLISHED) == "ready"
    recorded = passes(index_name=PUBLISHED, kind="backfill", errors__gt=0)
    assert len(recorded) == 1 and odd.id.hex in recorded[0].message
    lifecycle.forget_states()
    with pytest.raises(IndexValueError):
        Entity.objects.create(published="tomorrow")
    odd.delete()
    assert_exact([published])


def test_a_unique_conflict_is_reported_not_fatal():
    first = Entity.objects.create(username="bob")
    second = Entity.objects.create(username="alice")
    # Another way in (e.g. a restored backup): the second entity now claims "bob" too.
    raw_set_body(second, conf.get().codec.encode({"username": "bob"}))
    raw_delete("index_users_username", second.id.bytes)

    summary = Cleaner(indexes=["index_users_username"], once=True).run()

    assert not summary.failed
    assert summary.total("errors") == 1
    (repair,) = passes(index_name="index_users_username", kind="repair", errors=1)
    assert second.id.hex in repair.message
    assert [e.id for e in Entity.objects.filter_index(username="bob")] == [first.id]


# --- stopping, crashing, resuming --------------------------------------------------------------


def wait_for(condition, timeout: float = 60, process=None, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"child exited ({process.returncode}) early:\n{out}\n{err}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def backfilled() -> int:
    return sum(
        CleanerCheckpoint.objects.filter(index_name=PUBLISHED).values_list(
            "entities_done", flat=True
        )
    )


def test_connections_are_kept_from_batch_to_batch(published, posts):
    """Connections are renewed between passes, not per batch (that cost a fifth of a
    backfill): far fewer connects than batches."""
    opened = []

    def count(sender, connection, **kwargs):
        opened.append(connection.alias)

    connection_created.connect(count)
    try:
        summary = Cleaner(indexes=[PUBLISHED], once=True, batch_size=5).run()
    finally:
        connection_created.disconnect(count)

    batches = sum(-(-p.scanned // 5) for p in summary.passes)
    assert batches >= 100 and len(summary.passes) == 6
    assert len(opened) <= 4 * len(summary.passes) < batches
    assert state(PUBLISHED) == "ready"
    assert_exact([published])


def test_max_latency_holds_each_batch_while_the_servers_answer_slowly(
    published, posts, monkeypatch
):
    from schemaless_store.cleaner import worker

    class FakeProbe:
        """The probe thread run() keeps, answering slow, slow, quick after each batch."""

        made: list[FakeProbe] = []

        def __init__(self, probe, *, on_exit=None):
            self.probe, self.asked, self.running = probe, 0, False
            FakeProbe.made.append(self)

        def start(self):
            self.running = True
            return self

        def stop(self):
            self.running = False

        def recent(self):
            self.asked += 1
            return 1.0 if self.asked % 3 else 0.0

    cleaner = Cleaner(indexes=[PUBLISHED], once=True, batch_size=20, max_latency=0.005)
    holds: list[float] = []

    def wait(pause: float) -> bool:
        holds.append(pause)
        return False

    monkeypatch.setattr(worker, "LatencyProbe", FakeProbe)
    monkeypatch.setattr(cleaner._stop, "wait", wait)
    summary = cleaner.run()

    assert not summary.failed and state(PUBLISHED) == "ready"
    (probe,) = FakeProbe.made
    assert not probe.running  # stopped with the run
    assert 0 < probe.probe() < 1.0  # it probes the shard servers for real
    batches = sum(-(-p.scanned // 20) for p in summary.passes)
    assert probe.asked == 3 * batches  # after each batch: slow, slow, quick
    assert holds == [0.01, 0.02] * batches
    assert_exact([published])


def test_duty_pauses_after_each_batch_for_a_share_of_its_time(published, posts, monkeypatch):
    cleaner = Cleaner(indexes=[PUBLISHED], once=True, batch_size=20, duty=0.25)
    waits: list[tuple[float, float, float]] = []  # (asked at, pause, returned at)

    def wait(pause: float) -> bool:
        asked = time.monotonic()
        waits.append((asked, pause, time.monotonic()))
        return False

    monkeypatch.setattr(cleaner._stop, "wait", wait)
    summary = cleaner.run()

    assert not summary.failed and state(PUBLISHED) == "ready"
    batches = sum(-(-p.scanned // 20) for p in summary.passes)
    assert len(waits) == batches
    for (_, _, previous_end), (asked, pause, _) in itertools.pairwise(waits):
        # Working at most a quarter of the time: three times the batch's own time, which
        # began after the previous pause ended (or after a pass began).
        assert pause > 0
        assert pause <= 3 * (asked - previous_end) + 1e-6
    assert_exact([published])


def test_stop_finishes_the_current_batch_and_a_rerun_resumes(published, posts):
    # The throttle leaves seconds to stop it mid-backfill; stop() cuts the pause short.
    cleaner = Cleaner(indexes=[PUBLISHED], once=True, batch_size=10, sleep=0.2)
    thread = threading.Thread(target=lambda: (cleaner.run(), connections.close_all()))
    thread.start()
    wait_for(lambda: backfilled() >= 20, what="the backfill to start")
    cleaner.stop()
    thread.join(timeout=30)

    (stopped,) = passes(index_name=PUBLISHED)
    assert (stopped.kind, stopped.status) == ("backfill", "interrupted")
    assert stopped.entities_scanned % 10 == 0  # whole batches only
    assert state(PUBLISHED) == "building"
    done_before = backfilled()

    summary = Cleaner(indexes=[PUBLISHED], once=True, batch_size=10).run()

    rescanned = sum(p.scanned for p in summary.passes if p.kind == "backfill")
    assert rescanned == len(posts) - done_before
    assert state(PUBLISHED) == "ready"
    assert_exact([published])


def test_a_backfill_killed_with_sigkill_resumes_from_its_checkpoint(published, posts):
    process = child.spawn(
        "manage",
        "runcleaner",
        f"--index={PUBLISHED}",
        "--once",
        "--batch-size=10",
        "--sleep=0.1",
        extra_indexes=(PUBLISHED,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: backfilled() >= 30, process=process, what="the child's backfill")
    process.kill()
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    at_kill = {c.shard: c for c in CleanerCheckpoint.objects.filter(index_name=PUBLISHED)}
    done_at_kill = sum(c.entities_done for c in at_kill.values())
    assert 30 <= done_at_kill < len(posts)
    assert not all(c.done for c in at_kill.values())
    (dead,) = passes(index_name=PUBLISHED, status="running")  # it died mid-pass

    # The dead child's lock is gone: this cleaner is not told to skip anything.
    summary = Cleaner(indexes=[PUBLISHED], once=True, batch_size=25).run()

    assert not summary.skipped
    backfills = [p for p in summary.passes if p.kind == "backfill" and p.scanned]
    assert sum(p.scanned for p in backfills) == len(posts) - done_at_kill  # not from zero
    for shard, checkpoint in at_kill.items():
        if checkpoint.last_added_id and not checkpoint.done:
            rerun = next(p for p in backfills if p.shard == shard)
            assert rerun.scanned == checkpoint.entities_total - checkpoint.entities_done
    dead.refresh_from_db()
    assert dead.status == "interrupted"
    assert state(PUBLISHED) == "ready"
    assert_exact([published])


def test_two_cleaner_processes_on_the_same_index_at_once(published, posts):
    runs = [
        child.spawn(
            "manage",
            "runcleaner",
            f"--index={PUBLISHED}",
            "--once",
            "--batch-size=20",
            "--sleep=0.01",
            extra_indexes=(PUBLISHED,),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    for run, (out, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, f"{out}\n{err}"
        assert "Traceback" not in err
    assert state(PUBLISHED) == "ready"
    assert_exact([published])
    assert not passes(status="failed")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_runcleaner_runs_until_a_signal_then_exits_0(posts, sig):
    process = child.spawn(
        "manage",
        "runcleaner",
        "--batch-size=5",
        "--sleep=0.02",
        "--interval=60",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: CleanerPass.objects.exists(), process=process, what="a first pass")
    process.send_signal(sig)
    out, err = process.communicate(timeout=60)

    assert process.returncode == 0, f"{out}\n{err}"
    assert f"{signal.Signals(sig).name} received: finishing the current batch" in out
    assert "Cleaner finished in" in out
    assert not passes(status="running")


def test_a_long_run_keeps_totals_of_every_round_but_only_the_last_rounds_passes(posts):
    raw_delete("index_link", posts[0].id.bytes)
    cleaner = Cleaner(indexes=["index_link"], once=True)
    summary = Summary()

    cleaner.run_round(summary)
    cleaner.run_round(summary)

    assert summary.rounds == 2
    assert len(summary.passes) == 2 * len(shards.shard_aliases())  # repair + sweep, last round
    assert summary.total("inserted") == 1  # in the first round
    assert sum(p.inserted for p in summary.passes) == 0
    last_round = sum(p.scanned for p in summary.passes)
    assert last_round == len(posts) + len(index_rows("index_link"))
    assert summary.total("scanned") >= 2 * last_round - 1  # round 1 may miss the re-added row
    assert ", 2 rounds)" in summary.describe()


def test_a_second_ctrl_c_stops_at_once():
    cleaner = Cleaner(once=True)
    cleaner._on_signal(signal.SIGTERM, None)
    assert not cleaner.running
    cleaner._on_signal(signal.SIGTERM, None)  # a second SIGTERM: still a graceful stop
    with pytest.raises(KeyboardInterrupt):
        cleaner._on_signal(signal.SIGINT, None)


def test_a_signal_landing_inside_the_throttles_wait_does_not_deadlock():
    """A handler runs in the main thread between two bytecodes, so it can land while that
    thread, inside the throttle's ``Event.wait()``, holds the event's own lock: handling the
    signal must not need that lock (it did: runcleaner hung after "SIGTERM received")."""
    cleaner = Cleaner(once=True)
    handled = threading.Event()
    restore = cleaner._handle_signals()  # as run() does

    def signal_inside_the_wait():
        with cleaner._stop._cond:  # held by Event.wait() around its checks
            cleaner._on_signal(signal.SIGTERM, None)
            handled.set()

    # On a thread of its own, so that a deadlock fails this test instead of hanging the suite.
    threading.Thread(target=signal_inside_the_wait, daemon=True).start()
    try:
        assert handled.wait(10), "the signal handler blocked on the stop event's lock"
        assert not cleaner.running
        assert cleaner._stop.wait(10)  # and a wait in progress wakes up once the lock is free
    finally:
        restore()


# --- one cleaner per (index, shard) ---------------------------------------------------------


def test_lock_excludes_a_second_holder_until_released():
    alias = shards.shard_aliases()[0]
    first, second = ServerLock("index_link", alias), ServerLock("index_link", alias)
    other_index = ServerLock("index_tags", alias)
    try:
        assert first.acquire()
        assert not second.acquire()
        assert other_index.acquire()
        first.release()
        assert second.acquire()
    finally:
        for lock in (first, second, other_index):
            lock.release()


def test_lock_names_fit_the_server_limit():
    assert lock_name("test_shard0", "index_link") == "schemaless_cleaner.test_shard0.index_link"
    long_name = lock_name("a_database_with_a_long_name", "index_" + "x" * 58)
    assert len(long_name) <= 64 and long_name.startswith("schemaless_cleaner.")
    assert long_name != lock_name("a_database_with_a_long_name", "index_" + "y" * 58)


def test_a_shard_another_cleaner_holds_is_skipped_with_a_clear_message(posts):
    alias = shards.shard_aliases()[0]
    out, err = io.StringIO(), io.StringIO()
    with ServerLock("index_link", alias) as held:
        assert held.acquire()
        call_command("runcleaner", "--index=index_link", "--once", stdout=out, stderr=err)

    assert f"another cleaner is working on index_link on {alias}" in err.getvalue()
    assert "skipped" in out.getvalue()
    assert not passes(shard=alias)
    assert {p.status for p in passes(index_name="index_link")} == {"done"}


def test_a_cleaner_can_wait_for_the_lock(posts):
    alias = shards.shard_aliases()[0]
    held = ServerLock("index_link", alias)
    assert held.acquire()
    threading.Timer(0.5, held.release).start()
    started = time.monotonic()

    summary = Cleaner(indexes=["index_link"], shards=[alias], once=True, lock_wait=30).run()

    assert time.monotonic() - started >= 0.4
    assert not summary.skipped
    assert {(p.kind, p.status) for p in summary.passes} == {("repair", "done"), ("sweep", "done")}


# --- the command -------------------------------------------------------------------------------


def run_command(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("runcleaner", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_runcleaner_once_prints_a_summary(published, posts):
    out, _err = run_command("--once", "--batch-size=50")

    assert f"index {PUBLISHED} is backfilled on every shard: it is ready" in out
    summary = out.strip().splitlines()[-1]
    assert f"{len(posts)} rows inserted, 0 stale removed, 0 orphans removed" in summary
    assert summary.startswith("Cleaner finished in ")
    assert state(PUBLISHED) == "ready"


@pytest.mark.parametrize(("args", "niced"), [([], [10]), (["--nice=3"], [3]), (["--nice=0"], [])])
def test_runcleaner_lowers_its_cpu_priority(posts, monkeypatch, args, niced):
    calls: list[int] = []
    monkeypatch.setattr(runcleaner.os, "nice", calls.append)

    run_command("--once", "--index=index_link", *args)

    assert calls == niced


def test_runcleaner_is_quiet_with_verbosity_0(published, posts):
    out, err = run_command("--once", "-v", "0")
    assert (out, err) == ("", "")
    assert state(PUBLISHED) == "ready"


def test_runcleaner_on_one_shard_leaves_the_others(published, posts):
    alias = shards.shard_aliases()[1]
    out, _err = run_command(f"--index={PUBLISHED}", f"--shard={alias}", "--once")

    assert {p.shard for p in passes(index_name=PUBLISHED)} == {alias}
    assert state(PUBLISHED) == "building"
    assert "still building" in out
    run_command(f"--index={PUBLISHED}", "--once")
    assert state(PUBLISHED) == "ready"


def test_progress_bars_show_done_total_rate_and_eta(published, posts):
    stream = io.StringIO()
    Cleaner(indexes=[PUBLISHED], once=True, progress=True, progress_file=stream).run()
    shown = stream.getvalue()
    for alias in shards.shard_aliases():
        assert f"backfill {PUBLISHED} {alias}: 100%" in shown
    assert "entities/s" in shown and "<00:00" in shown  # rate and remaining time
    total = CleanerCheckpoint.objects.get(index_name=PUBLISHED, shard=alias).entities_total
    assert f"{total}/{total}" in shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--index=nope"], "no index 'nope' is declared; declared indexes: "),
        (["--shard=shard_9"], "'shard_9' is not a shard alias; the shards are shard_0, shard_1"),
        (["--batch-size=0"], "--batch-size: must be a whole number of at least 1, not '0'"),
        (["--sleep=-1"], "--sleep: must be a number of seconds (0 or more), not '-1'"),
        (["--lock-wait=soon"], "--lock-wait: must be a number of seconds"),
        (["--duty=0"], "--duty: must be a share above 0 and at most 1, not '0'"),
        (["--duty=1.5"], "--duty: must be a share above 0 and at most 1, not '1.5'"),
        (["--nice=20"], "--nice: must be a whole number from 0 to 19, not '20'"),
        (["--max-latency=0"], "--max-latency: must be a number of milliseconds above 0, not '0'"),
    ],
)
def test_runcleaner_refuses_bad_options(args, message):
    with pytest.raises(CommandError) as caught:
        run_command("--once", *args)
    assert message in str(caught.value)
    if "--index" in args[0]:
        assert "index_link" in str(caught.value)  # the declared ones are listed


def test_runcleaner_refuses_a_retired_index_and_points_to_dropindex():
    with child.declared(PUBLISHED):
        pass
    lifecycle.sync_states()  # no longer declared: retired
    assert state(PUBLISHED) == "retired"
    with pytest.raises(CommandError, match=f"manage.py dropindex {PUBLISHED}"):
        run_command(f"--index={PUBLISHED}", "--once")


def test_runcleaner_fails_on_an_index_without_state(posts):
    index = child.EXTRA_INDEXES["index_cleaner_color"]
    registry.register(index)
    try:
        with pytest.raises(
            CommandError, match=re.escape("has no state yet: run `manage.py migrateall`")
        ):
            run_command("--index=index_cleaner_color", "--once")
    finally:
        registry.unregister(index.name)


def test_a_failing_pass_is_recorded_and_the_others_still_run(posts, monkeypatch):
    broken = shards.shard_aliases()[0]
    from schemaless_store.tables import entities as entity_table

    original = entity_table.newest_first

    def failing(source, alias, bound, limit):
        if alias == broken:
            raise ShardUnavailable(alias, "connection refused")
        return original(source, alias, bound, limit)

    monkeypatch.setattr(entity_table, "newest_first", failing)
    with pytest.raises(CommandError) as caught:
        run_command("--index=index_link", "--once")

    assert f"repair of index_link on {broken}: failed" in str(caught.value)
    (failed,) = passes(status="failed")
    assert (failed.kind, failed.shard) == ("repair", broken)
    assert f"shard '{broken}' is unavailable: connection refused" in failed.message
    assert len(passes(status="done")) == 3  # its sweep, and the other shard's repair and sweep


def test_an_unreadable_metadata_database_is_reported_not_fatal(monkeypatch):
    def unreadable(refresh: bool = False):
        raise OperationalError("server has gone away")

    monkeypatch.setattr(lifecycle, "states", unreadable)
    summary = Cleaner(once=True).run()
    assert summary.problems == [
        "cannot read the index states: OperationalError: server has gone away"
    ]
    with pytest.raises(CommandError, match="cannot read the index states"):
        run_command("--once")

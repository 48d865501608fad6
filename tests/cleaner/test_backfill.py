"""The backfill of a new index over existing entities: it indexes them and the index is
ready; a lost lock stops it; unchanged entities are not re-checked; a writer that keeps
writing during it leaves it exact."""

from __future__ import annotations

import random
import threading

from django.db import connections

from schemaless_store.cleaner import Cleaner
from schemaless_store.models import CleanerCheckpoint, Entity
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.cleaner import PUBLISHED, fixed_after_backfill, passes, state
from tests.support.factories import PostFactory
from tests.support.invariants import assert_exact
from tests.support.raw import index_rows, raw_delete

pytestmark = STORE


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
    from schemaless_store.guards import server_lock as lock_module

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
    from schemaless_store.config.indexes import ENTITIES
    from schemaless_store.writes import stale_rows

    rechecked: list[int] = []
    remove_stale = stale_rows.remove_stale

    def counting(alias, candidates, source=ENTITIES):
        rechecked.append(len(candidates))
        return remove_stale(alias, candidates, source)

    monkeypatch.setattr(stale_rows, "remove_stale", counting)
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

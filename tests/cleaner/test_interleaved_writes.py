"""A writer that gets in between the cleaner's read and its write, at a chosen point
(``InterleavingCleaner``): the backfill, the repair and the removal of stale rows stay
exact."""

from __future__ import annotations

import contextlib
import threading
import uuid
from unittest import mock

import pytest
from django.db import connections

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from tests.support import STORE
from tests.support.cleaner import PUBLISHED, fixed_after_backfill, passes, plant_stale_link
from tests.support.invariants import assert_exact
from tests.support.raw import index_rows, raw_delete

pytestmark = STORE


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
        from schemaless_store.writes import index_writes, stale_rows

        real_insert, real_remove = repairs.insert, stale_rows.remove_stale
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
            patches.enter_context(mock.patch.object(stale_rows, "remove_stale", remove_stale))
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

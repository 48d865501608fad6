from __future__ import annotations

import random
import threading
import uuid

import pytest
from django.db import connections

from schemaless_store import conf, lifecycle, shards
from schemaless_store.cleaner import Cleaner
from schemaless_store.indexes import registry
from schemaless_store.models import CleanerCheckpoint, CleanerPass, Entity
from tests import child
from tests.conftest import STORE
from tests.factories import PostFactory
from tests.helpers import index_rows, insert_index_row
from tests.invariants import assert_exact

pytestmark = STORE

PUBLISHED = "index_cleaner_published"


@pytest.fixture
def posts() -> list[Entity]:
    return Entity.objects.bulk_put([PostFactory() for _ in range(200)])


@pytest.fixture
def published(posts):
    """A new index over existing entities: declared, its tables created, not backfilled."""
    with child.declared(PUBLISHED) as index:
        yield index


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
                    mine.append(Entity.objects.create(**PostFactory(published=rng.randrange(1000))))
                elif len(mine) > 50:
                    mine.pop(rng.randrange(len(mine))).delete()
                writes[0] += 1
        except BaseException as exc:
            failures.append(exc)
        finally:
            shards.close_index_connections()
            connections.close_all()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        Cleaner(indexes=[PUBLISHED], once=True, batch_size=10, sleep=0.005).run()
    finally:
        stop.set()
        thread.join()
    assert not failures, failures
    assert writes[0] > 20  # the writer really ran during the backfill
    assert state(PUBLISHED) == "ready"
    assert_exact()  # every index, the new one included: I3 with no extra pass
    assert fixed_after_backfill(PUBLISHED) == 0


class InterleavingCleaner(Cleaner):
    """Runs ``meanwhile`` once, between reading a batch and inserting its rows: a writer that
    gets in exactly there, deterministically."""

    def __init__(self, meanwhile, **options) -> None:
        super().__init__(**options)
        self.meanwhile = meanwhile

    def _insert(self, index, rows, result):
        if self.meanwhile is not None and rows:
            self.meanwhile, meanwhile = None, self.meanwhile
            meanwhile(rows)
        return super()._insert(index, rows, result)


@pytest.mark.parametrize("change", ["update", "delete"])
def test_backfill_of_an_entity_changed_between_read_and_insert_is_exact(published, posts, change):
    def writer(rows) -> None:
        entity = Entity.objects.get(id=uuid.UUID(bytes=rows[0][2]))
        if change == "delete":
            entity.delete()
        else:
            entity["published"] = -1
            entity.save()  # it removes the old row, which the cleaner is about to insert

    InterleavingCleaner(writer, indexes=[PUBLISHED], once=True, batch_size=50).run()

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

    assert_exact()
    sweeps = passes(index_name="index_link", kind="sweep")
    assert sum(p.stale_removed + p.orphans_removed for p in sweeps) == 0  # repair was exact


# --- repair and sweep ------------------------------------------------------------------------


def test_repair_inserts_missing_rows_and_removes_stale_ones(posts):
    link = registry.get("index_link")
    lost, changed = posts[0], posts[1]
    raw_delete("index_link", lost.id.bytes)
    # A stale row: a link the entity does not have (as if a writer died before removing it).
    old_link = link.column_value("link", "https://example.com/old")
    home = shards.alias_for(link.routing_key(old_link))
    insert_index_row("index_link", home, (old_link, changed.id.bytes))

    summary = Cleaner(indexes=["index_link"], once=True, batch_size=50).run()

    assert_exact()
    assert summary.total("inserted") == 1
    assert summary.total("stale_removed") == 1
    repairs = passes(index_name="index_link", kind="repair")
    assert sum(p.rows_inserted for p in repairs) == 1
    assert {p.status for p in repairs} == {"done"}


def test_sweep_removes_rows_whose_entity_is_gone(posts):
    user = registry.get("index_user_id")
    ghost = uuid.uuid4().bytes
    value = user.column_value("user_id", b"somebody")
    insert_index_row("index_user_id", shards.alias_for(user.routing_key(value)), (value, ghost))

    summary = Cleaner(indexes=["index_user_id"], once=True).run()

    assert summary.total("orphans_removed") == 1
    assert sum(p.orphans_removed for p in passes(kind="sweep")) == 1
    assert_exact()


def test_sweep_moves_rows_found_on_the_wrong_shard(posts):
    link = registry.get("index_link")
    post = posts[2]
    value = link.column_value("link", post["link"])
    home = shards.alias_for(link.routing_key(value))
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

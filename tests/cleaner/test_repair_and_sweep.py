"""The repair pass (every entity's rows are there) and the sweep pass (every row's entity
implies it): missing rows put back, stale and orphaned rows removed, rows on the wrong
shard moved, each row or entity walked once."""

from __future__ import annotations

import uuid

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE
from tests.support.cleaner import passes, plant_stale_link
from tests.support.factories import PostFactory
from tests.support.invariants import assert_exact
from tests.support.raw import index_rows, insert_index_row, raw_delete

pytestmark = STORE


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

    def spy(index, alias, batch, result):  # bodies, or the rows the server read (JSON bodies)
        walked[alias].extend((row[2], row[0], row[1]) for row in batch)
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

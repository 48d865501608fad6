from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connections

from schemaless_store.config.indexes import ENTITIES, registry
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map
from schemaless_store.values import index_values
from schemaless_store.writes import stale_rows
from tests.support import STORE
from tests.support.factories import PostFactory
from tests.support.raw import entity_rows, index_rows, insert_index_row

pytestmark = STORE

LINK = registry.get("index_link")
USER = registry.get("index_user_id")


def link_rows() -> set[tuple]:
    return {(value, entity_id) for value, entity_id, _alias in index_rows("index_link")}


def key(value) -> bytes:
    return index_values.encode_key(value)


def test_create_adds_a_row_per_index():
    post = PostFactory()
    e = Entity.objects.create(**post)
    assert link_rows() == {(key(post["link"]), e.id.bytes)}
    assert [(r[0], r[1]) for r in index_rows("index_user_id")] == [
        (key(post["user_id"]), e.id.bytes)
    ]
    assert [(r[0], r[1], r[2]) for r in index_rows("index_user_published")] == [
        (key(post["user_id"]), post["published"], e.id.bytes)
    ]


def test_update_of_an_indexed_property_moves_the_row():
    e = PostFactory.create(link="https://old")
    e["link"] = "https://new"
    e.save()
    assert link_rows() == {(key("https://new"), e.id.bytes)}
    assert list(Entity.objects.filter_index(link="https://old")) == []
    assert [x.id for x in Entity.objects.filter_index(link="https://new")] == [e.id]


def test_update_of_other_properties_leaves_rows_alone():
    e = PostFactory.create(link="https://same")
    e["title"] = "different"
    e.save()
    assert link_rows() == {(key("https://same"), e.id.bytes)}


def test_removing_a_property_removes_its_rows():
    e = PostFactory.create()
    del e["link"]
    e.save()
    assert link_rows() == set()
    assert len(index_rows("index_user_id")) == 1


def test_delete_removes_entity_then_rows():
    e = PostFactory.create()
    e.delete()
    assert entity_rows(e.shard) == []
    for index in registry.valid():
        assert index_rows(index.name) == []


def test_missing_property_means_no_row():
    Entity.objects.create(title="no link, no user")
    for index in registry.valid():
        assert index_rows(index.name) == []


def test_list_values_give_a_row_per_element():
    e = Entity.objects.create(tags=["python", "mysql", "python"])
    rows = {(r[0], r[1]) for r in index_rows("index_tags")}
    assert rows == {(key("python"), e.id.bytes), (key("mysql"), e.id.bytes)}
    assert [x.id for x in Entity.objects.filter_index(tags="mysql")] == [e.id]
    e["tags"] = ["mysql"]
    e.save()
    assert list(Entity.objects.filter_index(tags="python")) == []


def test_bulk_put_maintains_indexes():
    posts = PostFactory.build_batch(40)
    made = Entity.objects.bulk_put(posts, batch_size=9)
    assert len(link_rows()) == 40
    changed = [
        {**p, "id": e.id, "link": p["link"] + "/v2"} for p, e in zip(posts, made, strict=True)
    ]
    Entity.objects.bulk_put(changed)
    assert link_rows() == {(key(p["link"]), p["id"].bytes) for p in changed}


def test_stale_index_row_never_returns_the_entity():
    e = PostFactory.create(link="https://real")
    # A stale row, as a crash between writing it and the entity would leave behind:
    stale_value = key("https://stale")
    insert_index_row(
        "index_link",
        bucket_map.alias_for(index_values.encode_key(stale_value)),
        (stale_value, e.id.bytes),
    )
    assert list(Entity.objects.filter_index(link="https://stale")) == []
    assert Entity.objects.filter_index(link="https://stale").count() == 0
    # ids() reads the index alone, and says so in its docs:
    assert Entity.objects.filter_index(link="https://stale").ids() == [e.id]


def test_index_row_for_a_missing_entity_is_ignored():
    ghost = uuid.uuid4()
    value = key("https://ghost")
    insert_index_row(
        "index_link", bucket_map.alias_for(index_values.encode_key(value)), (value, ghost.bytes)
    )
    assert list(Entity.objects.filter_index(link="https://ghost")) == []


def test_save_of_unchanged_entity_is_idempotent():
    e = PostFactory.create()
    e.save()
    e.save()
    assert len(link_rows()) == 1


@pytest.mark.parametrize("first_write", ["save", "bulk_put"])
def test_a_key_put_back_before_the_removal_of_its_row_keeps_its_row(monkeypatch, first_write):
    """docs/design.md#write-protocol, step 5: writer A moves the entity off key K and, once it has
    committed, removes K's row; writer B puts K back in between (its insert of K's row is
    idempotent: the row is still there) and commits. A's removal re-checks the entity under
    its lock and must leave K's row, which the entity implies again. B runs exactly there:
    just before A's ``remove_stale``."""
    k, elsewhere = "https://example.com/k", "https://example.com/elsewhere"
    entity = PostFactory.create(link=k)
    real = stale_rows.remove_stale
    removals: list[dict] = []
    b_read: list[str] = []

    # Runs inside A's post-commit removal, which logs and swallows exceptions: record what B
    # sees here and assert it below.
    def writer_b_first(alias, candidates, source=ENTITIES):
        removals.append({i: set(rows) for i, rows in candidates.items()})
        if len(removals) == 1:  # A's removal, A committed: B gets in before it runs
            again = Entity.objects.get(id=entity.id)
            b_read.append(again["link"])
            again["link"] = k
            again.save()
        return real(alias, candidates, source)

    monkeypatch.setattr(stale_rows, "remove_stale", writer_b_first)
    if first_write == "save":
        entity["link"] = elsewhere
        entity.save()
    else:
        Entity.objects.bulk_put([{**entity.body_properties(), "id": entity.id, "link": elsewhere}])

    # The interleaving happened: A's removal of K's row ran after B's write (B's own removal,
    # of the "elsewhere" row, ran inside it, second).
    assert b_read == [elsewhere]  # B read A's committed write
    assert len(removals) == 2
    assert removals[0] == {entity.id.bytes: {(LINK, (key(k),))}}
    assert removals[1] == {entity.id.bytes: {(LINK, (key(elsewhere),))}}
    assert Entity.objects.get(id=entity.id)["link"] == k
    assert [e.id for e in Entity.objects.filter_index(link=k)] == [entity.id]
    assert link_rows() == {(key(k), entity.id.bytes)}


class _RolledBack(Exception):
    pass


@pytest.mark.parametrize("how", ["save", "bulk_put"])
def test_a_write_in_a_callers_transaction_removes_stale_rows_only_once_it_commits(how):
    """Inside the caller's ``transaction.atomic()``, a write that moves an entity from link A
    to link B must not delete A's row before the caller commits: if the caller rolls back, the
    entity has link A again and must still be found by it (on MySQL the index rows are written
    on their own autocommit connection, so a delete there would outlive the rollback)."""
    from django.db import transaction

    entity = Entity.objects.create(link="https://a")
    with pytest.raises(_RolledBack), transaction.atomic(using=entity.shard):
        if how == "save":
            moved = Entity.objects.get(id=entity.id)
            moved["link"] = "https://b"
            moved.save()
        else:
            Entity.objects.bulk_put([{"id": entity.id, "link": "https://b"}])
        raise _RolledBack
    assert Entity.objects.get(id=entity.id)["link"] == "https://a"
    assert [e.id for e in Entity.objects.filter_index(link="https://a")] == [entity.id]
    assert (key("https://a"), entity.id.bytes) in link_rows()
    # Committed, the same write removes the stale row once the caller commits.
    with transaction.atomic(using=entity.shard):
        Entity.objects.bulk_put([{"id": entity.id, "link": "https://b"}])
        assert (key("https://a"), entity.id.bytes) in link_rows()  # not yet
    assert link_rows() == {(key("https://b"), entity.id.bytes)}


def test_a_key_put_back_between_the_removals_read_and_its_delete_keeps_its_row(monkeypatch):
    """Step 5 of the write protocol (docs/design.md#write-protocol), under its lock: writer A moves
    the entity off key K; after its commit A's removal reads the entity again and finds K's row
    stale. Right then, before A deletes it, writer B (another thread, its own connection) puts K
    back. Whatever the order they end in, K's row must be there at the end. (A re-check that
    read without holding the entity's lock lets B commit first, its insert of K's row finding
    the row still there, and then deletes the row B relies on.)"""
    from schemaless_store.tables import entities as entity_table

    k, elsewhere = "https://example.com/k", "https://example.com/elsewhere"
    entity = PostFactory.create(link=k)
    real_remove, real_read = stale_rows.remove_stale, entity_table.lock
    main = threading.get_ident()
    in_removal = threading.Event()
    b_done = threading.Event()
    b_errors: list[BaseException] = []
    threads: list[threading.Thread] = []

    def writer_b() -> None:
        try:
            again = Entity.objects.get(id=entity.id)
            again["link"] = k
            again.save()
        except BaseException as exc:  # asserted below
            b_errors.append(exc)
        finally:
            b_done.set()
            connections.close_all()

    def removal(alias, candidates, source=ENTITIES):
        if threading.get_ident() == main:
            in_removal.set()
        return real_remove(alias, candidates, source)

    def read(*args, **kwargs):
        found = real_read(*args, **kwargs)
        if threading.get_ident() == main and in_removal.is_set() and not threads:
            assert found[entity.id.bytes]  # A's re-check read the entity: K is stale
            threads.append(threading.Thread(target=writer_b))
            threads[0].start()
            # B runs now. Give it a second to get past this removal if it can (then A's
            # deletion comes after B's commit); it should be waiting for it.
            b_done.wait(1.0)
        return found

    monkeypatch.setattr(stale_rows, "remove_stale", removal)
    monkeypatch.setattr(entity_table, "lock", read)
    entity["link"] = elsewhere
    entity.save()
    assert threads, "the removal's re-check never read the entity"
    threads[0].join(timeout=60)
    assert b_done.is_set() and not b_errors, b_errors
    assert Entity.objects.get(id=entity.id)["link"] == k
    assert link_rows() == {(key(k), entity.id.bytes)}
    assert [e.id for e in Entity.objects.filter_index(link=k)] == [entity.id]

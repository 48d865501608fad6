"""Issue 45, item 2: a partial update that sets every property of the indexes that read its
names, applied by the server on a JSON body. Its new index rows are known without a read,
so they go first (step 3); the commit's own query reads the old body under the row's lock,
and step 5 removes the rows it implied that the new values do not
(docs/design.md#partial-updates-on-the-server). Anything else keeps the read under the lock."""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

import pytest
from django.conf import settings
from django.db import connections, transaction
from django.db.models import F
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import IndexValueError
from schemaless_store.models import Entity
from schemaless_store.testing.faults import lost_commit_answers
from schemaless_store.writes import server_updates
from tests.core.test_partial_writes import _round_trips
from tests.core.test_server_partial_updates import (
    MSGPACK_CODEC,
    _old_route,
    _settings,
    _stored,
    json_bodies,
)
from tests.kindsapp.models import Note
from tests.support import STORE
from tests.support.invariants import assert_exact
from tests.support.raw import index_rows

pytestmark = [STORE, pytest.mark.usefixtures("no_receipt_pruning")]

__all__ = ["json_bodies"]  # the fixture, shared


def _rows_of(entity_id: uuid.UUID, table: str) -> list[tuple[Any, ...]]:
    """The index rows of one entity in ``table``, on every shard (values only, sorted)."""
    key = entity_id.bytes
    return sorted(row[:-2] for row in index_rows(table) if row[-2] == key)


def _value(table: str, prop: str, value: Any) -> Any:
    return registry.get(table).column_value(prop, value)


def _found(**conditions: Any) -> list[uuid.UUID]:
    return [e.id for e in Entity.objects.filter_index(**conditions)]


def _locking_read_first(sent: list[str]) -> bool:
    """Whether the write read the row under its lock before its commit (the other route),
    among the queries ``sent`` (a connection opened meanwhile adds its own)."""
    for query in sent:
        if "INSERT INTO schemaless_receipts" in query:
            return False
        if "SELECT id, added_id" in query and "FOR UPDATE" in query:
            return True
    raise AssertionError(f"no write: {sent}")


def _commit(sent: list[str]) -> str:
    return next(q for q in sent if q.startswith("BEGIN;INSERT INTO schemaless_receipts"))


# --- the route: rows first, the old values read in the commit ---------------------------------


@pytest.mark.mariadb_only
@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_an_indexed_update_writes_its_rows_then_commits_without_a_read_before(history: bool):
    with _settings(HISTORY=history):
        entity = Entity.objects.create(link="https://a", views=0)
        for n in range(3):  # connections and the map, opened first
            Entity.objects.filter(id=entity.id).update(views=n)
        with _round_trips() as sent:
            assert Entity.objects.filter(id=entity.id).update(link="https://b", views=9) == 1
        print("round trips:", len(sent), sent)
        # Step 3's row, then the commit with the old body read under the lock, then step 5
        # (its lock and re-check, the stale row's DELETE, its COMMIT).
        assert "index_link" in sent[0] and sent[0].startswith("INSERT"), sent
        assert sent[1].startswith("BEGIN;INSERT INTO schemaless_receipts"), sent
        assert "SELECT body INTO @sch" in sent[1], sent
        assert len(sent) == 5, sent
        assert _rows_of(entity.id, "index_link") == [(_value("index_link", "link", "https://b"),)]
        assert _found(link="https://b") == [entity.id] and not _found(link="https://a")
        assert _stored(entity.id)["views"] == 9

        entity["link"] = "https://b"  # the value it has: its row is there, nothing is stale
        with _round_trips() as sent:
            entity.save(update_fields=["link"])
        assert len(sent) == 2, sent
        entity["link"] = "https://c"
        entity.save(update_fields=["link"])
        assert _rows_of(entity.id, "index_link") == [(_value("index_link", "link", "https://c"),)]
        assert entity.row_body == Entity.objects.get(id=entity.id).row_body
        if history:  # the create, the warm-up's 3, then one version per update
            versions = entity.history()
            assert [dict(v.properties).get("link") for v in versions[-3:]] == [
                "https://b",
                "https://b",
                "https://c",
            ]
    assert_exact()


@pytest.mark.mariadb_only
def test_every_property_of_each_index_named_or_the_read_under_the_lock(json_bodies):
    entity = Entity.objects.create(user_id=b"u" * 16, published=1, tags=["x", "z"])
    Entity.objects.filter(id=entity.id).update(views=1)  # connections and the map
    # index_user_published reads published too: the rows need the stored value.
    with _round_trips() as sent:
        Entity.objects.filter(id=entity.id).update(user_id=b"v" * 16)
    assert _locking_read_first(sent), sent
    # Both of user_id's indexes wholly named: the server's route.
    with _round_trips() as sent:
        Entity.objects.filter(id=entity.id).update(user_id=b"w" * 16, published=2)
    assert not _locking_read_first(sent), sent
    assert "SELECT body INTO @sch" in _commit(sent), sent
    user = _value("index_user_id", "user_id", b"w" * 16)
    assert _rows_of(entity.id, "index_user_published") == [(user, 2)]
    assert _rows_of(entity.id, "index_user_id") == [(user,)]
    # A list: one row per element. A tuple is refused, as the other route refuses it.
    with pytest.raises(IndexValueError, match="tuple"):
        Entity.objects.filter(id=entity.id).update(tags=("x", "y"))
    Entity.objects.filter(id=entity.id).update(tags=["x", "y"])
    tag = lambda t: _value("index_tags", "tags", t)  # noqa: E731
    assert _rows_of(entity.id, "index_tags") == sorted([(tag("x"),), (tag("y"),)])
    assert _stored(entity.id)["tags"] == ["x", "y"]
    entity.pop("tags")
    entity.save(update_fields=["tags"])
    assert _rows_of(entity.id, "index_tags") == [] and "tags" not in _stored(entity.id)
    # A unique index's claim checks its holder under the row's lock: the other route.
    entity["username"] = f"u{uuid.uuid4().hex[:8]}"
    with _round_trips() as sent:
        entity.save(update_fields=["username"])
    assert _locking_read_first(sent), sent
    assert_exact()


def test_which_indexed_updates_the_server_can_apply(json_bodies):
    how = server_updates.plan({"link": "https://a", "views": 1})
    assert how is not None and {i.name for i in how.indexes} == {"index_link"}
    assert how.rows == {(registry.get("index_link"), (_value("index_link", "link", "https://a"),))}
    how = server_updates.plan({"user_id": b"1" * 16, "published": 3})
    assert {i.name for i in how.indexes} == {"index_user_id", "index_user_published"}
    assert server_updates.plan({"user_id": b"1" * 16}) is None  # a composite's other property
    assert server_updates.plan({"username": "u"}) is None  # unique
    assert server_updates.plan({"link": F("link")}) is None  # a value only the row knows
    assert server_updates.plan({"published": "one", "user_id": b"1"}) is None  # does not fit
    assert server_updates.plan({"link": server_updates.ABSENT}).rows == frozenset()
    assert server_updates.plan({"views": 1}).indexes == frozenset()


# --- when the server's statement changes nothing ------------------------------------------------


@pytest.mark.mariadb_only
def test_a_row_not_changed_leaves_no_row_of_its_values(json_bodies):
    # A missing entity: its rows went first, and go again once the answer says so.
    assert Entity.objects.filter(id=uuid.uuid4()).update(link="https://nobody") == 0
    assert not index_rows("index_link")
    # A MessagePack body: the server does not touch it, the read-under-lock route writes it.
    with override_settings(SCHEMALESS={**settings.SCHEMALESS, "CODEC": MSGPACK_CODEC}):
        old = Entity.objects.create(link="https://m1")
    assert Entity.objects.filter(id=old.id).update(link="https://m2") == 1
    assert _rows_of(old.id, "index_link") == [(_value("index_link", "link", "https://m2"),)]
    # A kind whose own index reads a name (a note's title): left to the other route.
    note = Note.objects.create(title="one", stars=1)
    Entity.objects.filter(id=note.id).update(title="two", link="https://n")
    assert [n.id for n in Note.objects.filter_index(title="two")] == [note.id]
    assert _found(link="https://n") == [note.id]
    assert_exact()


# --- a lost answer, a caller's transaction, concurrent writers ----------------------------------


@pytest.mark.mariadb_only
@pytest.mark.parametrize("land", [True, False], ids=["landed", "not-landed"])
def test_a_lost_answer_is_decided_by_the_receipt_and_a_stale_row_is_the_cleaners(json_bodies, land):
    entity = Entity.objects.create(link="https://a")
    with lost_commit_answers(land=land) as faults:
        assert Entity.objects.filter(id=entity.id).update(link="https://b") == 1
    assert faults.lost == 1
    assert _found(link="https://b") == [entity.id] and not _found(link="https://a")
    rows = _rows_of(entity.id, "index_link")
    new = (_value("index_link", "link", "https://b"),)
    if land:  # the old values were in the lost answer: the stale row waits for the cleaner
        assert sorted(rows) == sorted([new, (_value("index_link", "link", "https://a"),)])
        Cleaner(indexes=["index_link"], once=True, batch_size=50).run()
    else:  # the retry ran the statement again and learned them
        assert rows == [new]
    assert _rows_of(entity.id, "index_link") == [new]
    assert_exact()


@pytest.mark.mariadb_only
def test_inside_a_callers_transaction_the_stale_row_goes_once_it_commits(json_bodies):
    entity = Entity.objects.create(link="https://a")
    with pytest.raises(RuntimeError), transaction.atomic(using=entity.shard):
        Entity.objects.filter(id=entity.id).update(link="https://b")
        raise RuntimeError("roll back")
    assert _stored(entity.id)["link"] == "https://a" and _found(link="https://a") == [entity.id]
    assert not _found(link="https://b")  # its row may stay (the cleaner's): queries re-check
    with transaction.atomic(using=entity.shard):
        Entity.objects.filter(id=entity.id).update(link="https://c")
        assert _rows_of(entity.id, "index_link").count(
            (_value("index_link", "link", "https://a"),)
        )  # removed only after the commit
    assert _found(link="https://c") == [entity.id] and not _found(link="https://a")
    Cleaner(indexes=["index_link"], once=True, batch_size=50).run()  # b's row, if left
    assert _rows_of(entity.id, "index_link") == [(_value("index_link", "link", "https://c"),)]


@pytest.mark.mariadb_only
def test_concurrent_indexed_updates_leave_exactly_the_last_values_rows(json_bodies):
    entity = Entity.objects.create(link="https://start", views=0)
    threads, each = 4, 15
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(each):
                if i % 2:
                    Entity.objects.filter(id=entity.id).update(link=f"https://{n}-{i}")
                else:
                    Entity.objects.filter(id=entity.id).update(views=F("views") + 1)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=write, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors
    stored = _stored(entity.id)
    assert stored["views"] == threads * ((each + 1) // 2)
    assert _rows_of(entity.id, "index_link") == [(_value("index_link", "link", stored["link"]),)]
    assert _found(link=stored["link"]) == [entity.id]
    assert_exact()


# --- the same result as the read-under-lock route ------------------------------------------------

names = st.sampled_from(["link", "tags", "views", "title"])
plain = st.text(max_size=20) | st.lists(st.text(max_size=5), max_size=3) | st.integers(0, 9)
updates = st.dictionaries(names, plain | st.just(server_updates.ABSENT), min_size=1, max_size=3)


@pytest.mark.mariadb_only
@hypothesis_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(start=st.dictionaries(names, plain, max_size=4), change=updates)
def test_the_server_writes_the_rows_and_body_the_read_under_lock_route_writes(
    json_bodies, start, change
):
    try:
        ours = Entity.objects.create(**start)
    except IndexValueError:
        return  # a start no index takes (an int link): nothing to compare
    theirs = Entity.objects.create(**start)
    outcomes = []
    for entity, route in ((ours, contextlib.nullcontext), (theirs, _old_route)):
        for name, value in change.items():
            if value is server_updates.ABSENT:
                entity.pop(name, None)
            else:
                entity[name] = value
        try:
            with route():
                entity.save(update_fields=list(change))
            outcomes.append(None)
        except IndexValueError as exc:  # a value an index refuses: both routes refuse it
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1], outcomes
    assert bytes(Entity.objects.get(id=ours.id).row_body) == bytes(
        Entity.objects.get(id=theirs.id).row_body
    )
    for table in ("index_link", "index_tags"):
        assert _rows_of(ours.id, table) == _rows_of(theirs.id, table), table

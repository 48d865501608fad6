"""Write receipts (docs/design.md#receipts): after a commit whose answer was lost, the retry
asks the shard for the write's receipt instead of guessing from the stored body, so another
client's write in between can neither be undone nor make the write apply twice (issue 34,
items 1-6). Each test loses one commit answer *after* the commit landed and lets another
client write the same entity before the error reaches the writer."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import OperationalError
from django.db.backends.mysql.base import DatabaseWrapper
from django.test import override_settings

from schemaless_store import DELETE
from schemaless_store.exceptions import OutcomeUnknown, ShardUnavailable
from schemaless_store.mapping import apply as mapping_apply
from schemaless_store.mapping import map_entities
from schemaless_store.models import Cell, Entity
from schemaless_store.sql.server_errors import CR_CONN_HOST_ERROR
from schemaless_store.tables import map_runs
from schemaless_store.testing.faults import lost_commit_answers
from schemaless_store.topology import shards
from tests.support import STORE, mapfuncs

pytestmark = [STORE, pytest.mark.mariadb_only]

HISTORY = override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})


def setting(name: str, value: Any) -> Callable[[Entity], None]:
    def fn(entity: Entity) -> None:
        entity[name] = value

    return fn


def add_one(entity: Entity) -> None:
    entity["n"] = entity.get("n", 0) + 1


def stored(key: uuid.UUID) -> Entity | None:
    try:
        return Entity.objects.get(id=key)
    except Entity.DoesNotExist:
        return None


# --- item 1: no resurrection ---------------------------------------------------------------


def test_a_create_that_landed_is_not_redone_over_another_clients_delete():
    key = uuid.uuid4()
    with lost_commit_answers(after_commit=lambda: Entity.objects.get(id=key).delete()) as faults:
        made = Entity.objects.create(id=key, user_id="u1", link="https://gone")
    assert faults.lost == 1
    assert made.id == key
    assert stored(key) is None, "the acknowledged delete was undone"
    assert list(Entity.objects.filter_index(link="https://gone")) == []


def test_an_update_that_landed_is_not_redone_over_another_clients_delete():
    entity = Entity.objects.create(user_id="u1", link="https://old")
    entity["link"] = "https://new"
    with lost_commit_answers(after_commit=lambda: Entity.objects.get(id=entity.id).delete()):
        entity.save()
    assert stored(entity.id) is None


def test_a_bulk_put_that_landed_is_not_redone_over_another_clients_delete():
    first = Entity.objects.create(user_id="u1", n=0)
    with lost_commit_answers(after_commit=lambda: Entity.objects.get(id=first.id).delete()):
        Entity.objects.bulk_put([{"id": first.id, "user_id": "u1", "n": 1}])
    assert stored(first.id) is None


# --- item 2: modify's fn once --------------------------------------------------------------


def test_modify_does_not_apply_fn_again_after_its_write_landed():
    entity = Entity.objects.create(user_id="u1", n=0)
    with lost_commit_answers(after_commit=lambda: Entity.objects.modify(entity.id, add_one)):
        Entity.objects.modify(entity.id, add_one)
    assert Entity.objects.get(id=entity.id)["n"] == 2


def test_modify_that_deletes_does_not_run_again_after_its_delete_landed():
    entity = Entity.objects.create(user_id="u1", n=0)
    calls: list[int] = []

    def drop(found: Entity) -> Any:
        calls.append(1)
        return DELETE

    with lost_commit_answers():
        Entity.objects.modify(entity.id, drop)
    assert calls == [1]
    assert stored(entity.id) is None


# --- item 3: a mapentities batch once ------------------------------------------------------


@pytest.fixture
def _clean_runs() -> Iterator[None]:
    mapfuncs.CALLS.clear()
    yield
    for alias in shards.shard_aliases():
        map_runs.create_tables(alias)
        with shards.connection(alias).cursor() as cursor:
            for table in (map_runs.RUNS, map_runs.SAVED, map_runs.FAILURES):
                cursor.execute(f"DELETE FROM {table}")


@pytest.mark.usefixtures("_clean_runs")
def test_a_mapentities_batch_that_landed_is_not_applied_again(monkeypatch):
    ids = [Entity.objects.create(user_id="u1", n=i).id for i in range(4)]
    write = mapping_apply.Applier._write
    lost: list[int] = []
    claimed = threading.Lock()  # one worker per shard: the first batch of any of them

    def first_batch_loses_its_answer(self: Any, alias: str, items: list[Any]) -> None:
        if not claimed.acquire(blocking=False):
            return write(self, alias, items)
        touched = uuid.UUID(bytes=items[0][1].key)
        other = lambda: Entity.objects.modify(touched, setting("other", 1))  # noqa: E731
        with lost_commit_answers(after_commit=other) as faults:
            write(self, alias, items)
        lost.append(faults.lost)

    monkeypatch.setattr(mapping_apply.Applier, "_write", first_batch_loses_its_answer)
    summary = map_entities("tests.support.mapfuncs.add_one", batch_size=10)
    assert summary.ok, summary.problems
    assert lost == [1]
    found = Entity.objects.get_many(ids)
    assert sorted(e["mapped"] for e in found.values()) == [1, 1, 1, 1]
    assert sum(e.get("other", 0) for e in found.values()) == 1


# --- item 4: no lost update ----------------------------------------------------------------


def test_a_saves_retry_does_not_overwrite_another_clients_acknowledged_modify():
    entity = Entity.objects.create(user_id="u1", title="a")
    entity["title"] = "mine"
    with lost_commit_answers(
        after_commit=lambda: Entity.objects.modify(entity.id, setting("title", "theirs"))
    ):
        entity.save()
    assert Entity.objects.get(id=entity.id)["title"] == "theirs"


# --- item 5: right answers -----------------------------------------------------------------


def test_a_create_that_landed_returns_although_another_client_changed_it():
    key = uuid.uuid4()
    with lost_commit_answers(after_commit=lambda: Entity.objects.modify(key, setting("n", 5))):
        made = Entity.objects.create(id=key, user_id="u1", n=1)
    assert made.id == key
    assert made.added_id is not None
    assert Entity.objects.get(id=key)["n"] == 5


def test_a_delete_that_landed_says_it_deleted_one():
    entity = Entity.objects.create(user_id="u1")
    with lost_commit_answers() as faults:
        deleted, _by_model = entity.delete()
    assert faults.lost == 1
    assert deleted == 1
    assert stored(entity.id) is None


def test_a_bulk_put_that_landed_counts_its_rows_once():
    with lost_commit_answers() as faults:
        made = Entity.objects.bulk_put([{"user_id": "u1", "n": i} for i in range(3)])
    assert faults.lost == 1
    assert sorted(e["n"] for e in Entity.objects.get_many([m.id for m in made]).values()) == [
        0,
        1,
        2,
    ]


# --- item 6: history once ------------------------------------------------------------------


@HISTORY
def test_a_save_that_landed_appends_its_history_version_once():
    entity = Entity.objects.create(user_id="u1", n=1)
    entity["n"] = 2
    with lost_commit_answers() as faults:
        entity.save()
    assert faults.lost == 1
    assert [v.properties["n"] for v in entity.history()] == [1, 2]


@HISTORY
def test_a_delete_that_landed_appends_its_history_version_once():
    entity = Entity.objects.create(user_id="u1", n=1)
    with lost_commit_answers(after_commit=lambda: Entity.objects.create(id=entity.id, n=3)):
        entity.delete()
    assert [None if v.deleted else v.properties["n"] for v in entity.history()] == [1, None, 3]


def test_a_cell_version_that_landed_is_returned_and_stored_once():
    row = uuid.uuid4()
    with lost_commit_answers() as faults:
        cell = Cell.objects.put(row, "profile", {"name": "a"})
    assert faults.lost == 1
    assert cell.ref_key == 1
    assert [c.body for c in Cell.objects.versions(row, "profile")] == [{"name": "a"}]


# --- a commit that did not land runs again --------------------------------------------------


def test_a_save_whose_commit_did_not_land_runs_again():
    entity = Entity.objects.create(user_id="u1", n=1)
    entity["n"] = 2
    with lost_commit_answers(land=False) as faults:
        entity.save()
    assert faults.lost == 1
    assert Entity.objects.get(id=entity.id)["n"] == 2


def test_a_delete_whose_commit_did_not_land_runs_again_and_says_one():
    entity = Entity.objects.create(user_id="u1")
    with lost_commit_answers(land=False):
        deleted, _by_model = entity.delete()
    assert deleted == 1
    assert stored(entity.id) is None


def test_a_cell_put_whose_commit_did_not_land_runs_again():
    row = uuid.uuid4()
    with lost_commit_answers(land=False):
        cell = Cell.objects.put(row, "profile", {"name": "a"})
    assert cell.ref_key == 1
    assert [c.body for c in Cell.objects.versions(row, "profile")] == [{"name": "a"}]


# --- the outcome unknown -------------------------------------------------------------------


def refusing_connections(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """A callable that makes every new connection to the shards fail from then on (error
    2003, nothing sent), as a server that stays down would."""

    def refuse(self: Any, params: Any) -> Any:
        raise OperationalError(CR_CONN_HOST_ERROR, "Can't connect to server (refused by the test)")

    return lambda: monkeypatch.setattr(DatabaseWrapper, "get_new_connection", refuse)


@override_settings(SCHEMALESS={"BUCKETS": 4096, "RECEIPT_WAIT": 0.5})
def test_a_lost_answer_on_a_server_that_stays_down_is_an_unknown_outcome(monkeypatch):
    entity = Entity.objects.create(user_id="u1", n=1)
    entity["n"] = 2
    try:
        with (
            pytest.raises(OutcomeUnknown) as raised,
            lost_commit_answers(after_commit=refusing_connections(monkeypatch)),
        ):
            entity.save()
    finally:
        monkeypatch.undo()
    assert isinstance(raised.value, ShardUnavailable)  # existing handlers still catch it
    assert raised.value.alias == entity._state.db
    assert Entity.objects.get(id=entity.id)["n"] == 2  # it had landed: never guessed either way


def test_a_server_that_refuses_before_anything_was_sent_is_not_an_unknown_outcome(monkeypatch):
    entity = Entity.objects.create(user_id="u1", n=1)
    entity["n"] = 2
    shards.connection(entity._state.db).close()
    refusing_connections(monkeypatch)()
    try:
        with pytest.raises(ShardUnavailable) as raised:
            entity.save()
    finally:
        monkeypatch.undo()
    assert not isinstance(raised.value, OutcomeUnknown)
    assert Entity.objects.get(id=entity.id)["n"] == 1

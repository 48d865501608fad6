"""Issue 45, item 2, under concurrency and faults: ``F()`` increments added on the server (and
under the lock where it cannot), a concurrent writer, a lost commit answer decided by the
receipt, a bucket move (docs/design.md#partial-updates-on-the-server). The one-round-trip
statements themselves: tests/core/test_server_partial_updates.py."""

from __future__ import annotations

import io
import random
import threading
import time
import uuid

import pytest
from django.core.management import call_command
from django.db import connections
from django.db.models import F, Value

from schemaless_store.exceptions import Conflict, InvalidQuery
from schemaless_store.models import Entity
from schemaless_store.tables import receipts as receipt_table
from schemaless_store.testing.faults import lost_commit_answers
from schemaless_store.topology import bucket_map
from schemaless_store.values.jsonbody import SAFE_INT
from tests.core.test_server_partial_updates import _settings, _stored, json_bodies
from tests.support import STORE, buckets
from tests.support.moving import MOVED, source_and_target
from tests.support.near import Other, held, near_on

pytestmark = STORE

__all__ = ["json_bodies"]  # the fixture, shared

# --- F() ----------------------------------------------------------------------------------------


def test_f_applies_to_the_stored_value_on_every_route(json_bodies):
    entity = Entity.objects.create(n=5, ratio=1.5, big=SAFE_INT, word="a")
    Entity.objects.filter(id=entity.id).update(n=F("n") + 2)
    Entity.objects.filter(id=entity.id).update(n=3 + F("n"))
    Entity.objects.filter(id=entity.id).update(n=F("n") - 1)
    Entity.objects.filter(id=entity.id).update(ratio=F("ratio") * 2)  # a float: in Python
    Entity.objects.filter(id=entity.id).update(big=F("big") + 1)  # past the safe range
    Entity.objects.filter(id=entity.id).update(word=F("word") + Value("b"))
    entity["n"] = F("n") + 10  # a plain entity's save(update_fields) applies it too
    entity.save(update_fields=["n"])
    entity["n"] = F("n") - 10
    entity.save(update_fields=["n"])
    stored = _stored(entity.id)
    assert stored["n"] == 9 and type(stored["n"]) is int
    assert stored["ratio"] == 3.0 and type(stored["ratio"]) is float
    assert stored["big"] == SAFE_INT + 1
    assert stored["word"] == "ab"
    with pytest.raises(InvalidQuery, match="lacks"):
        Entity.objects.filter(id=entity.id).update(n=F("missing") + 1)
    assert _stored(entity.id)["n"] == 9


@pytest.mark.mariadb_only
def test_f_increments_under_concurrency_lose_none(json_bodies):
    entity = Entity.objects.create(n=0, other=0)
    threads, each = 4, 25
    errors: list[BaseException] = []

    def add(name: str) -> None:
        try:
            for _ in range(each):
                Entity.objects.filter(id=entity.id).update(**{name: F(name) + 1})
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    modified = [0]

    def modify() -> None:  # a read-modify-write of the same row, beside them
        try:
            for _ in range(each):
                try:
                    Entity.objects.modify(
                        entity.id, lambda e: e.update(other=e["other"] + 1), attempts=50
                    )
                except Conflict:  # the increments kept changing the row: not applied
                    continue
                modified[0] += 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=add, args=("n",)) for _ in range(threads)]
    workers.append(threading.Thread(target=modify))
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors
    assert _stored(entity.id) == {"id": entity.id, "n": threads * each, "other": modified[0]}


@pytest.mark.mariadb_only
def test_a_concurrent_writer_of_other_properties_keeps_its_change(json_bodies):
    entity = Entity.objects.create(a=0, b=0, link="https://c")
    rounds = 40
    errors: list[BaseException] = []

    def server_route() -> None:
        try:
            mine = Entity.objects.get(id=entity.id)
            for n in range(1, rounds + 1):
                mine["a"] = n
                mine.save(update_fields=["a"])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    def lock_route() -> None:  # an indexed property with it: the read-under-lock route
        try:
            theirs = Entity.objects.get(id=entity.id)
            for n in range(1, rounds + 1):
                theirs["b"] = n
                theirs["link"] = f"https://c/{n}"
                theirs.save(update_fields=["b", "link"])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=server_route), threading.Thread(target=lock_route)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors
    stored = _stored(entity.id)
    assert (stored["a"], stored["b"], stored["link"]) == (rounds, rounds, f"https://c/{rounds}")


# --- a lost answer -------------------------------------------------------------------------------


@pytest.mark.mariadb_only
@pytest.mark.parametrize("land", [True, False], ids=["landed", "not-landed"])
@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_a_lost_answer_applies_the_increment_exactly_once(land: bool, history: bool):
    with _settings(HISTORY=history):
        entity = Entity.objects.create(n=0)
        key = entity.id
        other = []

        def another_client() -> None:  # after the commit landed, before the error
            Entity.objects.filter(id=key).update(seen=True)
            other.append(_stored(key)["n"])

        receipts = receipt_table.count(entity.shard)
        with lost_commit_answers(after_commit=another_client, land=land) as faults:
            assert Entity.objects.filter(id=key).update(n=F("n") + 1) == 1
        assert faults.lost == 1
        assert _stored(key)["n"] == 1 and _stored(key)["seen"] is True
        assert other == [1 if land else 0]
        # Landed: its receipt answered the retry; not landed: the retry wrote one.
        assert receipt_table.count(entity.shard) >= receipts + 1
        if history:  # the create, this update once, the other client's
            assert len(entity.history()) == 3


@pytest.mark.mariadb_only
def test_a_lost_answer_of_a_save_leaves_an_instance_that_conflicts_rather_than_overwrites(
    json_bodies,
):
    entity = Entity.objects.create(title="a", views=0)
    with lost_commit_answers():
        entity["views"] = 1
        entity.save(update_fields=["views"])
    assert _stored(entity.id)["views"] == 1
    Entity.objects.filter(id=entity.id).update(title="theirs")
    entity["views"] = 2
    with pytest.raises(Conflict):
        entity.save(if_unchanged=True)
    assert _stored(entity.id) == {"id": entity.id, "title": "theirs", "views": 1}


# --- a bucket move -------------------------------------------------------------------------------


@pytest.mark.mariadb_only
@pytest.mark.usefixtures("buckets_restored")
def test_increments_during_a_bucket_move_each_land_once_on_the_new_owner(json_bodies):
    made = [Entity.objects.create(id=buckets.id_in_bucket(n), n=0) for n in range(0, 300, 10)]
    _source, target = source_and_target()
    acknowledged: dict[uuid.UUID, int] = {e.id: 0 for e in made}
    stop = threading.Event()
    errors: list[BaseException] = []
    rng = random.Random(45)
    print("seed 45")

    def write() -> None:
        try:
            while not stop.is_set():
                key = rng.choice(made).id
                assert Entity.objects.filter(id=key).update(n=F("n") + 1) == 1
                acknowledged[key] += 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        time.sleep(0.3)
        call_command(
            "movebuckets",
            "--to",
            target,
            "--buckets",
            MOVED,
            "--batch",
            "7",
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert sum(acknowledged.values()) > 20, acknowledged
    bucket_map.forget()
    for key, count in acknowledged.items():
        assert bucket_map.alias_for(key.bytes) == target
        assert _stored(key) == {"id": key, "n": count}, key


# --- the near cache ------------------------------------------------------------------------------


def test_the_near_caches_drop_an_entity_the_server_updated():
    with _settings(), near_on(DROP_TIMEOUT=2.0):
        other = Other()
        try:
            made = Entity.objects.create(n=0, title="a")
            assert other.ask("read_near", made.id)["n"] == 0
            held(made.id)  # this process holds a copy too
            Entity.objects.filter(id=made.id).update(n=F("n") + 1)
            assert Entity.objects.get(id=made.id)["n"] == 1  # its own copy went at once
            after = other.ask("wait_gone", made.id)
            assert after["n"] == 1 and after["waited"] < 2, after  # the push, not a timeout
            assert other.ask("read_near", made.id)["n"] == 1  # copied again
            made["n"] = 5
            made.save(update_fields=["n"])
            assert Entity.objects.get(id=made.id)["n"] == 5
            assert other.ask("wait_gone", made.id)["n"] == 5
        finally:
            other.close()

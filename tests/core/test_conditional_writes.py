"""Updates that never lose a write (issue 28, part 2): ``save(if_unchanged=True)``,
``delete(if_unchanged=True)``, ``Entity.objects.modify()``, and the counter that ten writers
(eight threads, two processes) increment at once."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid

import pytest
from django.db import connections

from schemaless_store import DELETE
from schemaless_store.exceptions import Conflict
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from schemaless_store.values import index_values
from tests.support import STORE, child
from tests.support.invariants import assert_exact
from tests.support.raw import count_everything, index_rows

pytestmark = STORE


def test_save_if_unchanged_writes_when_nothing_changed_and_again_after_its_own_write():
    entity = Entity.objects.create(link="https://a", n=1)
    entity["n"] = 2
    entity.save(if_unchanged=True)
    entity["n"] = 3
    entity.save(if_unchanged=True)  # the instance now expects what it wrote itself
    read = Entity.objects.get(id=entity.id)
    assert read["n"] == 3
    read["link"] = "https://b"
    read.save(if_unchanged=True)
    assert Entity.objects.get(id=entity.id).properties == {
        "id": entity.id,
        "link": "https://b",
        "n": 3,
    }


def test_save_if_unchanged_refuses_after_another_write_and_writes_nothing():
    entity = Entity.objects.create(link="https://a", n=1)
    mine = Entity.objects.get(id=entity.id)
    theirs = Entity.objects.get(id=entity.id)
    theirs["n"] = 2
    theirs.save()
    before = count_everything()
    mine["n"] = 10
    mine["link"] = "https://mine"
    with pytest.raises(Conflict) as caught:
        mine.save(if_unchanged=True)
    assert caught.value.ids == [entity.id]
    assert Entity.objects.get(id=entity.id)["n"] == 2
    assert count_everything() == before
    assert [row[0] for row in index_rows("index_link")] == [index_values.encode_key("https://a")]
    assert_exact()


def test_save_if_unchanged_refuses_a_deleted_entity_and_does_not_bring_it_back():
    entity = Entity.objects.create(n=1)
    Entity.objects.get(id=entity.id).delete()
    entity["n"] = 2
    with pytest.raises(Conflict):
        entity.save(if_unchanged=True)
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=entity.id)


def test_an_instance_never_read_expects_no_stored_entity():
    ident = uuid.uuid4()
    Entity(id=ident, n=1).save(if_unchanged=True)  # none stored: written
    with pytest.raises(Conflict):
        Entity(id=ident, n=2).save(if_unchanged=True)
    assert Entity.objects.get(id=ident)["n"] == 1


def test_delete_and_recreate_with_the_same_body_is_a_change():
    entity = Entity.objects.create(n=1)
    Entity.objects.get(id=entity.id).delete()
    Entity.objects.create(id=entity.id, n=1)  # the same body, a new row (a new added_id)
    entity["n"] = 2
    with pytest.raises(Conflict):
        entity.save(if_unchanged=True)


def test_delete_if_unchanged():
    entity = Entity.objects.create(n=1)
    other = Entity.objects.get(id=entity.id)
    other["n"] = 2
    other.save()
    with pytest.raises(Conflict):
        entity.delete(if_unchanged=True)
    assert Entity.objects.get(id=entity.id)["n"] == 2
    assert other.delete(if_unchanged=True) == (1, {"schemaless_store.Entity": 1})


def test_modify_returns_the_saved_entity_and_retries_on_conflict():
    entity = Entity.objects.create(n=1, link="https://a")
    calls = []

    def add(e: Entity) -> None:
        calls.append(e["n"])
        if len(calls) == 1:  # someone else writes between this attempt's read and its save
            other = Entity.objects.get(id=entity.id)
            other["n"] = 100
            other.save()
        e["n"] += 1

    saved = Entity.objects.modify(entity.id, add)
    assert calls == [1, 100]
    assert saved["n"] == 101 and Entity.objects.get(id=entity.id)["n"] == 101


def test_modify_gives_up_with_conflict_after_its_attempts():
    entity = Entity.objects.create(n=1)
    tries = []

    def always_overtaken(e: Entity) -> None:
        tries.append(1)
        other = Entity.objects.get(id=entity.id)
        other["n"] += 10
        other.save()
        e["n"] = -1

    with pytest.raises(Conflict):
        Entity.objects.modify(entity.id, always_overtaken, attempts=3)
    assert len(tries) == 3
    assert Entity.objects.get(id=entity.id)["n"] == 31  # the others' writes, none of ours


def test_modify_of_a_missing_id_raises_does_not_exist_and_may_delete():
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.modify(uuid.uuid4(), lambda e: None)
    entity = Entity.objects.create(n=1, link="https://gone")
    Entity.objects.modify(entity.id, lambda e: DELETE)
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=entity.id)
    assert index_rows("index_link") == []
    with pytest.raises(ValueError):
        Entity.objects.modify(entity.id, lambda e: None, attempts=0)


THREADS = 8
PROCESSES = 2
TIMES = 200


@pytest.mark.slow
def test_ten_writers_adding_to_one_counter_lose_no_update():
    counter = Entity.objects.create(n=0)
    processes = [
        child.spawn("counter", counter.id.hex, str(TIMES), stdout=subprocess.PIPE, text=True)
        for _ in range(PROCESSES)
    ]
    errors: list[str] = []
    retried = [0] * THREADS

    def add(number: int) -> None:
        try:
            retried[number] = child.add_to_counter(counter.id.hex, TIMES)
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            connections.close_all()
            shards.close_index_connections()

    threads = [threading.Thread(target=add, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    answers = []
    for process in processes:
        out, _ = process.communicate(timeout=600)
        assert process.returncode == 0, out
        answers.append(json.loads(out.strip().splitlines()[-1]))
    assert not errors
    assert Entity.objects.get(id=counter.id)["n"] == (THREADS + PROCESSES) * TIMES
    # The writers really raced: some attempts were overtaken and retried.
    assert sum(retried) + sum(a["retried"] for a in answers) > 0


@pytest.mark.usefixtures("no_receipt_pruning")  # its DELETE would make one save's list longer
def test_the_check_costs_no_statement_of_its_own():
    from django.test.utils import CaptureQueriesContext

    entity = Entity.objects.create(link="https://a", n=1)
    conn = connections[entity.shard]
    counts = []
    for conditional in (False, True, False, True):
        entity["n"] += 1
        with CaptureQueriesContext(conn) as captured:
            entity.save(if_unchanged=conditional)
        counts.append([q["sql"].split()[0] for q in captured.captured_queries])
    assert "UPDATE" in counts[0]
    assert counts[0] == counts[1] == counts[2] == counts[3]


# A retry after a lost commit answer no longer compares bodies: its receipt decides
# (tests/core/test_receipts.py).

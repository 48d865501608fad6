"""``mapentities`` after a bucket move (issue 34, item 9; docs/mapping.md): a run over one
shard, then a move of buckets onto that shard, then the same run again: the rerun maps every
entity that moved there (their rows have the target's new ``added_id``s, above the walk's saved
end), once, and still passes over entities created since the run (written in the new shape).
"""

from __future__ import annotations

import uuid

import pytest

from schemaless_store.mapping import map_entities
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map
from tests.support import STORE, buckets, mapfuncs
from tests.support.mapping import forget_runs
from tests.support.moving import MOVED, MOVED_SET, run, source_and_target

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]

ADD_ONE = "tests.support.mapfuncs.add_one"


@pytest.fixture(autouse=True)
def _fresh_runs():
    mapfuncs.CALLS.clear()
    yield
    forget_runs()


def mapped() -> dict[uuid.UUID, int | None]:
    return {e.id: e.get("mapped") for e in Entity.objects.all()}


@pytest.mark.parametrize("where", [None, {"tags": "t"}])
def test_a_rerun_maps_the_entities_that_moved_onto_the_shard_it_walked(where):
    _source, target = source_and_target()
    on_target = bucket_map.current().owners.index(target)
    stay = [
        Entity.objects.create(id=buckets.id_in_bucket(on_target), n=n, tags=["t"]).id
        for n in range(4)
    ]
    moving = [
        Entity.objects.create(id=buckets.id_in_bucket(n * 7), n=n, tags=["t"]).id for n in range(6)
    ]
    assert all(bucket_map.bucket_for(i.bytes) in MOVED_SET for i in moving)
    first = map_entities(ADD_ONE, shards=[target], where=where)
    assert first.ok, first.problems
    assert first.changed == len(stay)
    run("--to", target, "--buckets", MOVED)
    # Created after the first run, on the target, in a bucket it owned: the new shape already
    # (it is not mapped by a rerun of the same run).
    # Its id above the first run's last one, where a --where rerun resumes from: it must still
    # not be taken (it was taken when its random id fell there, now and then).
    last = max(i.bytes for i in stay)
    later_id = next(
        i for i in iter(lambda: buckets.id_in_bucket(on_target), None) if i.bytes > last
    )
    later = Entity.objects.create(id=later_id, n=99, tags=["t"]).id
    again = map_entities(ADD_ONE, shards=[target], where=where)
    assert again.ok, again.problems
    now = mapped()
    assert {now[i] for i in stay} == {1}
    assert {now[i] for i in moving} == {1}  # they are on the shard the run walks now
    assert again.changed == len(moving)
    assert now[later] is None
    # A third run finds nothing more to do.
    third = map_entities(ADD_ONE, shards=[target], where=where)
    assert third.ok and third.changed == 0
    assert {v for k, v in mapped().items() if k != later} == {1}


def test_a_batch_split_by_a_move_maps_each_entity_once_when_a_later_item_conflicts(monkeypatch):
    """Issue 43, finding 4. A batch read by a map from before a move is written to the old
    owner, which refuses the moved bucket: the batch is split and written item by item. An
    item that committed must leave the batch then: when a later item conflicts (a user wrote
    it), the batch is written again, and an item still in it was saved a second time (its
    check fails: the run itself changed it), read again and mapped twice."""
    import dataclasses
    import time

    from schemaless_store.mapping.apply import Applier
    from schemaless_store.tables import map_runs
    from schemaless_store.topology import shards

    for alias in shards.shard_aliases():
        map_runs.create_tables(alias)  # as a run does before its first batch
    source, target = source_and_target()
    owners = bucket_map.current().owners
    kept = [n for n in range(300, len(owners)) if owners[n] == source][:2]
    first = Entity.objects.create(id=buckets.id_in_bucket(kept[0]), n=1).id
    moving = Entity.objects.create(id=buckets.id_in_bucket(5), n=2).id
    last = Entity.objects.create(id=buckets.id_in_bucket(kept[1]), n=3).id
    read = [Entity.objects.get(id=i) for i in (first, moving, last)]
    before = bucket_map.refresh()
    run("--to", target, "--buckets", MOVED)
    user = Entity.objects.get(id=last)
    user["n"] = 30  # a user's write after the run read it: the run's save of it conflicts
    user.save()
    # The run routes by the map it read the batch with (as a process whose copy is not due).
    monkeypatch.setattr(
        bucket_map, "_cached", dataclasses.replace(before, fetched_at=time.monotonic() + 3600)
    )
    result = Applier(Entity, mapfuncs.add_one, "split-run").apply(read)
    monkeypatch.undo()
    bucket_map.forget()
    assert not result.failures, result.failures
    now = mapped()
    assert [now[i] for i in (first, moving, last)] == [1, 1, 1]
    assert Entity.objects.get(id=last)["n"] == 30  # the user's write is kept
    # The item saved first is never read again (the others are: the moved one has the
    # target's added_id, the last one the user's write; their first result was never saved).
    assert mapfuncs.CALLS["add_one"].count(first) == 1

"""The versioned cell store: append, read, immutability, concurrent writers (SQLite and MariaDB)."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import pytest
from django.db import connections

from schemaless_store.exceptions import CellImmutable, InvalidCell, UnsupportedValue
from schemaless_store.models import Cell, Entity
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE
from tests.support.reliability_report import recording

pytestmark = STORE


def all_cells() -> list[tuple]:
    found = []
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT row_key, column_name, ref_key FROM cell ORDER BY added_at")
            found.extend((alias, bytes(k), c, r) for k, c, r in cursor.fetchall())
    return found


def test_versions_are_numbered_from_one_and_read_back():
    row = uuid.uuid4()
    first = Cell.objects.put(row, "users", {"username": "bret", "n": 1})
    second = Cell.objects.put(row, "users", {"username": "bret.taylor", "n": 2})
    assert (first.ref_key, second.ref_key) == (1, 2)
    assert first.row_key == row and first.column_name == "users"
    assert Cell.objects.get_cell(row, "users").body == {"username": "bret.taylor", "n": 2}
    assert Cell.objects.get_cell(row, "users", ref_key=1).body == {"username": "bret", "n": 1}
    assert [c.ref_key for c in Cell.objects.versions(row, "users")] == [1, 2]
    assert [c.body["n"] for c in Cell.objects.versions(row, "users")] == [1, 2]
    assert second.added_at > first.added_at
    assert second.created_at >= first.created_at


def test_a_row_lists_the_latest_version_of_each_column():
    row = uuid.uuid4()
    Cell.objects.put(row, "users", {"v": 1})
    Cell.objects.put(row, "users", {"v": 2})
    Cell.objects.put(row, "schools", {"name": "Stanford"})
    Cell.objects.put(uuid.uuid4(), "users", {"v": "someone else"})
    latest = Cell.objects.row(row)
    assert list(latest) == ["schools", "users"]
    assert latest["users"].ref_key == 2 and latest["users"].body == {"v": 2}
    assert latest["schools"].body == {"name": "Stanford"}
    assert Cell.objects.row(uuid.uuid4()) == {}


def test_a_missing_cell_is_does_not_exist():
    row = uuid.uuid4()
    with pytest.raises(Cell.DoesNotExist, match="column 'users'"):
        Cell.objects.get_cell(row, "users")
    Cell.objects.put(row, "users", {"v": 1})
    with pytest.raises(Cell.DoesNotExist, match="no version 7"):
        Cell.objects.get_cell(row, "users", ref_key=7)
    assert Cell.objects.versions(row, "companies") == []


def test_cells_live_on_the_shard_of_their_row_key_with_its_entity():
    entity = Entity.objects.create(title="x")
    cell = Cell.objects.put(entity.id, "notes", {"text": "hello"})
    assert cell.shard == entity.shard
    assert [(a, k) for a, k, _c, _r in all_cells()] == [(entity.shard, entity.row_id)]
    assert Cell.objects.using(entity.shard).get().column_name == "notes"


def test_an_explicit_version_is_stored_once_and_never_changes():
    row = uuid.uuid4()
    stored = Cell.objects.put(row, "users", {"v": 1}, ref_key=10)
    assert stored.ref_key == 10
    # The same body again is a retry: the stored cell comes back, nothing new is written.
    again = Cell.objects.put(row, "users", {"v": 1}, ref_key=10)
    assert again.added_at == stored.added_at
    with pytest.raises(CellImmutable, match="already exists with another body"):
        Cell.objects.put(row, "users", {"v": 2}, ref_key=10)
    assert Cell.objects.get_cell(row, "users").body == {"v": 1}
    assert len(all_cells()) == 1
    # The next automatic version follows the highest one.
    assert Cell.objects.put(row, "users", {"v": 3}).ref_key == 11


def test_stored_cells_cannot_be_changed_or_deleted_through_django():
    row = uuid.uuid4()
    cell = Cell.objects.put(row, "users", {"v": 1})
    on_shard = Cell.objects.using(cell.shard)
    with pytest.raises(CellImmutable):
        cell.save()
    with pytest.raises(CellImmutable):
        cell.delete()
    with pytest.raises(CellImmutable):
        on_shard.filter(ref_key=1).update(ref_key=2)
    with pytest.raises(CellImmutable):
        on_shard.all().delete()
    assert Cell.objects.get_cell(row, "users").body == {"v": 1}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((uuid.uuid4(), "", {"v": 1}), InvalidCell),
        ((uuid.uuid4(), "x" * 65, {"v": 1}), InvalidCell),
        ((uuid.uuid4(), "_entity", {"v": 1}), InvalidCell),
        ((uuid.uuid4(), 7, {"v": 1}), InvalidCell),
        ((uuid.uuid4(), "users", ["not", "a", "dict"]), InvalidCell),
        ((uuid.uuid4(), "users", {"v": {1, 2}}), UnsupportedValue),
        ((b"short", "users", {"v": 1}), ValueError),
    ],
)
def test_bad_cells_raise_and_write_nothing(args, error):
    with pytest.raises(error):
        Cell.objects.put(*args)
    assert all_cells() == []


@pytest.mark.parametrize("ref_key", [0, -1, 2**63, True, "3", 1.5])
def test_bad_versions_raise_and_write_nothing(ref_key):
    with pytest.raises(InvalidCell, match="ref_key"):
        Cell.objects.put(uuid.uuid4(), "users", {"v": 1}, ref_key=ref_key)
    assert all_cells() == []


def test_a_cell_may_have_no_body():
    row = uuid.uuid4()
    cell = Cell.objects.put(row, "users", None)
    assert cell.body is None and Cell.objects.get_cell(row, "users").body is None


@pytest.mark.reliability
def test_concurrent_writers_to_one_column_get_distinct_versions_and_lose_none():
    row = uuid.uuid4()
    threads, per_thread = 6, 15
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(per_thread):
                Cell.objects.put(row, "users", {"writer": n, "i": i})
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()
            shards.close_index_connections()

    with recording("Cells: 6 threads appending versions of one column (versions)") as tally:
        workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        for error in errors:
            tally.fail(f"a writer raised {error!r}")
        stored = Cell.objects.versions(row, "users")
        wanted = {(n, i) for n in range(threads) for i in range(per_thread)}
        got = [(c.body["writer"], c.body["i"]) for c in stored]
        tally.cases = len(wanted)
        for version in sorted(wanted - set(got)):
            tally.lost(f"version {version} was not stored")
        ref_keys = [c.ref_key for c in stored]
        for ref_key, times in Counter(ref_keys).items():
            if times > 1:
                tally.wrong(f"ref_key {ref_key} given to {times} versions", count=times - 1)
    assert ref_keys == list(range(1, threads * per_thread + 1))
    assert sorted(got) == sorted(wanted)
    # Each writer's own versions are in the order it wrote them.
    for n in range(threads):
        mine = [c.body["i"] for c in stored if c.body["writer"] == n]
        assert mine == list(range(per_thread))


def test_an_older_explicit_version_does_not_become_the_latest():
    row = uuid.uuid4()
    Cell.objects.put(row, "users", {"v": 5}, ref_key=5)
    Cell.objects.put(row, "users", {"v": 2}, ref_key=2)
    assert Cell.objects.get_cell(row, "users").body == {"v": 5}
    assert Cell.objects.row(row)["users"].ref_key == 5
    assert [c.ref_key for c in Cell.objects.versions(row, "users")] == [2, 5]
    assert Cell.objects.put(row, "users", {"v": 6}).ref_key == 6
    with connections[bucket_map.alias_for(row.bytes)].cursor() as cursor:
        cursor.execute("SELECT ref_key FROM cell_head WHERE row_key = %s", [row.bytes])
        assert [tuple(r) for r in cursor.fetchall()] == [(6,)]

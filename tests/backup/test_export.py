"""``manage.py exportentities``: JSON Lines in key order, shard after shard, with the first and
last lines, one shard or a time window, cells; and ``dumpdata``'s word about entities."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import override_settings

from schemaless_store.backup.export import Exporter
from schemaless_store.config import conf
from schemaless_store.models import Cell, Entity
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE
from tests.support.backups import command, export
from tests.support.factories import NumberedFactory
from tests.support.values import EVERY_TYPE, same

pytestmark = STORE


def read_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_entity_one_line_each_in_key_order_shard_after_shard(tmp_path):
    made = NumberedFactory.create_batch(30, **EVERY_TYPE)
    path = tmp_path / "store.jsonl"
    run = export(path)
    assert "exported 30 entities from 2 shards" in run.stdout
    first, *entity_lines, last = read_lines(path)
    assert first["export"]["shards"] == list(conf.get().shards)
    assert first["export"]["format"] == 1 and first["export"]["cells"] is False
    assert last == {"end": {"entities": 30, "cells": 0}}
    expected = [
        e
        for alias in shards.shard_aliases()
        for e in Entity.objects.using(alias).order_by("added_id")
    ]
    assert [line["id"] for line in entity_lines] == [str(e.id) for e in expected]
    by_id = {e.id: e for e in made}
    for line in entity_lines:
        assert set(line) == {"id", "updated", "properties"}
        entity = by_id[uuid.UUID(line["id"])]
        assert dt.datetime.fromisoformat(line["updated"]) == entity.row_updated
        assert line["properties"]["uuid"] == {"$uuid": str(EVERY_TYPE["uuid"])}
    assert not (tmp_path / "store.jsonl.partial").exists()


def test_stdout_gets_the_lines_and_stderr_the_summary():
    NumberedFactory.create_batch(3)
    run = command("exportentities")
    assert run.error is None
    assert len(run.stdout.splitlines()) == 5  # first line, 3 entities, last line
    assert "exported 3 entities" in run.stderr


def test_one_shard(tmp_path):
    NumberedFactory.create_batch(40)
    path = tmp_path / "one.jsonl"
    export(path, "--shard", "shard_1")
    ids = [line["id"] for line in read_lines(path)[1:-1]]
    assert ids and {Entity.objects.get(id=i).shard for i in ids} == {"shard_1"}
    assert len(ids) == Entity.objects.using("shard_1").count()


def test_since_keeps_the_entities_written_at_or_after_it(tmp_path):
    old = NumberedFactory.create_batch(10)
    cut = dt.datetime.now(dt.UTC)
    for alias in shards.shard_aliases():  # the old ones were written an hour before the cut
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "UPDATE entities SET updated = %s",
                [connections[alias].ops.adapt_datetimefield_value(cut - dt.timedelta(hours=1))],
            )
    new = NumberedFactory.create_batch(5, start=10)
    old[0]["n"] = 100
    old[0].save()
    path = tmp_path / "since.jsonl"
    export(path, "--since", cut.isoformat())
    found = {uuid.UUID(line["id"]) for line in read_lines(path)[1:-1]}
    assert found == {e.id for e in new} | {old[0].id}
    assert read_lines(path)[0]["export"]["since"] == cut.isoformat()


def test_a_bad_since_is_refused():
    with pytest.raises(CommandError, match="ISO 8601"):
        call_command("exportentities", "--since", "yesterday", stdout=io.StringIO())


def test_an_unknown_shard_is_refused():
    run = command("exportentities", "--shard", "nowhere")
    assert run.error and "not a shard alias" in run.error


@override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})
def test_cells_and_history_follow_each_shards_entities(tmp_path):
    entity = Entity.objects.create(title="one")
    entity["title"] = "two"
    entity.save()
    Cell.objects.put(entity.id, "users", {"email": "a@example.com"})
    Cell.objects.put(entity.id, "users", None)
    path = tmp_path / "cells.jsonl"
    export(path, "--cells")
    found = read_lines(path)
    assert found[0]["export"]["cells"] is True
    cells = [line for line in found if "row_key" in line]
    assert [(c["column"], c["ref_key"]) for c in cells] == [
        ("_entity", 1),
        ("_entity", 2),
        ("users", 1),
        ("users", 2),
    ]
    assert cells[1]["properties"] == {"title": "two"} and cells[3]["properties"] is None
    assert found[-1] == {"end": {"entities": 1, "cells": 4}}
    assert found.index(cells[0]) > found.index(next(line for line in found if "id" in line))


def test_an_undecodable_body_is_named_and_fails_the_export(tmp_path):
    good, bad = Entity.objects.bulk_put([{"n": 1}, {"n": 2}])
    with connections[bad.shard].cursor() as cursor:
        cursor.execute("UPDATE entities SET body = %s WHERE id = %s", [b"\x7fjunk", bad.row_id])
    path = tmp_path / "corrupt.jsonl"
    run = command("exportentities", "--output", str(path))
    assert run.error and "could not be decoded" in run.error
    assert bad.id.hex in run.stdout
    assert [line["id"] for line in read_lines(path)[1:-1]] == [str(good.id)]


def test_a_copy_on_a_shard_that_does_not_own_its_bucket_is_skipped_and_counted(tmp_path):
    """Left behind when SCHEMALESS["SHARDS"] changes without the data moving: reads ignore
    such a copy, and so does the export (an import would otherwise let it win)."""
    kept, other = Entity.objects.bulk_put([{"n": 1}, {"n": 2}])
    stray_alias = next(a for a in shards.shard_aliases() if a != kept.shard)
    with connections[kept.shard].cursor() as cursor:
        cursor.execute("SELECT updated, body FROM entities WHERE id = %s", [kept.row_id])
        updated, body = cursor.fetchone()
    with connections[stray_alias].cursor() as cursor:
        cursor.execute(
            "INSERT INTO entities (id, updated, body) VALUES (%s, %s, %s)",
            [kept.row_id, updated, body],
        )
    path = tmp_path / "strays.jsonl"
    run = export(path)
    ids = [line["id"] for line in read_lines(path)[1:-1]]
    assert sorted(ids) == sorted([str(kept.id), str(other.id)])
    assert "exported 2 entities" in run.stdout
    assert "skipped 1 copies on a shard that no longer owns their bucket" in run.stdout


def test_cells_a_bucket_move_left_on_its_source_are_skipped_and_counted(tmp_path, buckets_restored):
    """A move keeps the source's cells of the rows it moves (the feed's record there; reads
    go to the owner): the export writes each cell version once, from the shard that owns its
    row key, and counts the copies it skipped."""

    from tests.support import buckets

    source = bucket_map.alias_for(buckets.id_in_bucket(7).bytes)
    target = buckets.other_alias(source)
    moved, stays = buckets.id_in_bucket(7), uuid.uuid4()
    for row_key in (moved, stays):
        Cell.objects.put(row_key, "status", {"n": 1})
        Cell.objects.put(row_key, "status", {"n": 2})
    call_command("movebuckets", "--to", target, "--buckets", "7", stdout=io.StringIO())
    Cell.objects.put(moved, "status", {"n": 3})  # on the new owner
    with connections[source].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM cell WHERE row_key = %s", [moved.bytes])
        assert cursor.fetchone()[0] == 2  # the source's copies, kept
    path = tmp_path / "moved-cells.jsonl"
    run = export(path, "--cells")
    found = [line for line in read_lines(path) if "row_key" in line]
    versions = sorted((line["row_key"], line["ref_key"], line["properties"]) for line in found)
    assert versions == sorted(
        [(str(moved), n, {"n": n}) for n in (1, 2, 3)] + [(str(stays), n, {"n": n}) for n in (1, 2)]
    )
    assert "and 5 cells" in run.stdout
    assert "skipped 2 copies on a shard that no longer owns their bucket" in run.stdout


def test_a_failed_export_leaves_the_previous_file(tmp_path, monkeypatch):
    NumberedFactory.create_batch(5)
    path = tmp_path / "keep.jsonl"
    path.write_text("yesterday's backup\n")

    def broken(self, alias, out, summary, bar):
        raise OSError("disk full")

    monkeypatch.setattr(Exporter, "_entities", broken)
    run = command("exportentities", "--output", str(path))
    assert run.error and "disk full" in run.error
    assert path.read_text() == "yesterday's backup\n"
    assert not (tmp_path / "keep.jsonl.partial").exists()


def test_chunks_keep_memory_flat(monkeypatch, tmp_path):
    """Reads are chunked by keyset: no query returns more than the chunk size."""
    from schemaless_store.tables import entities as entity_table

    NumberedFactory.create_batch(25)
    sizes = []
    real = entity_table.in_key_order

    def spy(alias, after, limit, since=None):
        rows = real(alias, after, limit, since)
        sizes.append(len(rows))
        return rows

    monkeypatch.setattr(entity_table, "in_key_order", spy)
    export(tmp_path / "chunks.jsonl", "--chunk-size", "4")
    assert max(sizes) == 4 and sum(sizes) == 25


@pytest.mark.mariadb_only
def test_each_shard_is_read_in_one_snapshot(tmp_path, monkeypatch):
    """An entity written while its shard is being exported is not in the export: the shard's
    lines are the shard as of the instant its snapshot was taken."""
    from schemaless_store.tables import entities as entity_table

    NumberedFactory.create_batch(20)
    real = entity_table.in_key_order
    written = []

    def write_during(alias, after, limit, since=None):
        rows = real(alias, after, limit, since)
        if not written:
            # Another writer (its own connection: this thread's is inside the snapshot).
            import threading

            def other() -> None:
                written.extend(NumberedFactory.create_batch(40, start=100))
                for conn in connections.all(initialized_only=True):
                    conn.close()

            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
        return rows

    monkeypatch.setattr(entity_table, "in_key_order", write_during)
    path = tmp_path / "snap.jsonl"
    export(path, "--chunk-size", "3", "--shard", "shard_0")
    found = {line["id"] for line in read_lines(path)[1:-1]}
    assert found == {str(e.id) for e in Entity.objects.using("shard_0") if e["n"] < 100}


# --- dumpdata --------------------------------------------------------------------------------


def test_dumpdata_of_entities_without_a_shard_says_what_to_do():
    Entity.objects.create(n=1)
    with pytest.raises(CommandError, match=r"live on the shards.*exportentities"):
        call_command("dumpdata", "schemaless_store.Entity", stdout=io.StringIO())


def test_dumpdata_of_one_shard_warns_and_dumps():
    entity = Entity.objects.create(n=1)
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "dumpdata", "schemaless_store.Entity", database=entity.shard, stdout=out, stderr=err
    )
    assert "raw rows" in err.getvalue() and "exportentities" in err.getvalue()
    assert len(json.loads(out.getvalue())) == 1


def test_dumpdata_of_everything_says_entities_are_not_in_it():
    out, err = io.StringIO(), io.StringIO()
    call_command("dumpdata", "auth", "schemaless_store", stdout=out, stderr=err)
    assert "not in this dump" in err.getvalue()
    json.loads(out.getvalue())
    err = io.StringIO()
    call_command("dumpdata", "auth", stdout=io.StringIO(), stderr=err)
    assert err.getvalue() == ""


def test_round_trip_of_every_type(tmp_path):
    from tests.support.backups import wipe

    entity = Entity.objects.create(**EVERY_TYPE)
    path = tmp_path / "all.jsonl"
    export(path)
    wipe()
    assert command("importentities", str(path)).error is None
    assert same(Entity.objects.get(id=entity.id).body_properties(), EVERY_TYPE)

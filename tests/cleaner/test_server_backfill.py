"""The cleaner's passes over JSON bodies through the server's extraction (issue 45, item 3;
the extraction itself: test_server_extraction.py): the backfill writes the rows in place
(``INSERT ... SELECT``) or streams them, without a body decoded for the rows the server
gives, and the repair and the sweep read the rows on the server too."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import override_settings

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import Index
from schemaless_store.models import Entity
from schemaless_store.tables import json_index
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values import codec as codec_module
from schemaless_store.values.codec import decode_body
from tests.support import STORE, child
from tests.support.buckets import hand_over
from tests.support.cleaner import fixed_after_backfill
from tests.support.invariants import assert_exact
from tests.support.raw import index_rows, insert_index_row

pytestmark = [STORE, pytest.mark.mariadb_only]

ALIAS = "shard_0"
JSON = "schemaless_store.values.codec.JsonCodec"


# --- the backfill ------------------------------------------------------------------------------

LINK = Index(table="index_sx_link", properties=["link"], shard_on="link")


def _counting(monkeypatch) -> dict[str, int]:
    """Bodies decoded in Python, batches the server read, ``INSERT ... SELECT`` statements."""
    counts = {"decoded": 0, "read": 0, "in_place": 0}
    decode, read_batch = codec_module.decode_body, json_index.read_batch
    insert_select = json_index.insert_select

    def counting_decode(body):
        counts["decoded"] += 1
        return decode(body)

    def counting_read(*args, **kwargs):
        counts["read"] += 1
        return read_batch(*args, **kwargs)

    def counting_insert(*args, **kwargs):
        written = insert_select(*args, **kwargs)
        assert written is not None
        counts["in_place"] += 1
        return written

    from schemaless_store.cleaner import repairs

    monkeypatch.setattr(repairs, "decode_body", counting_decode)
    monkeypatch.setattr(json_index, "read_batch", counting_read)
    monkeypatch.setattr(json_index, "insert_select", counting_insert)
    return counts


def _posts(count: int) -> list[Entity]:
    return [
        Entity.objects.create(link=f"https://example.com/{n}", n=n, title="é" * (n % 3))
        for n in range(count)
    ]


@pytest.mark.usefixtures("buckets_restored")
def test_a_shard_that_serves_every_bucket_backfills_in_place(monkeypatch):
    hand_over(range(bucket_map.current().buckets), ALIAS)
    bucket_map.forget()
    with override_settings(SCHEMALESS={**_settings(), "CODEC": JSON}):
        entities = _posts(60)
        tagged = Entity.objects.create(link=uuid.uuid4(), n=-1)  # a tagged value: Python's
        assert {shards_of(e) for e in entities} == {ALIAS}
        with child.declared(LINK):
            counts = _counting(monkeypatch)
            summary = Cleaner(indexes=[LINK.name], once=True, batch_size=25).run()
            assert_exact([LINK])
    assert summary.total("inserted") == 61
    assert counts["in_place"] >= 3 and counts["read"] >= 3
    assert counts["decoded"] <= 3  # the tagged entity's body: backfill, repair, sweep
    assert fixed_after_backfill(LINK.name) == 0
    assert tagged.id


@pytest.mark.usefixtures("buckets_restored")
def test_an_in_place_insert_that_read_a_replaced_version_is_taken_back(monkeypatch):
    """The ``INSERT ... SELECT`` reads each entity as of its own statement: a writer may replace
    the version it read, and remove that version's row, before the insert lands. Here it
    lands the old row after the writer's commit (what that race leaves): the entity's version
    no longer matches the batch's read, its rows go to the locked re-check, and the old row
    is gone before the backfill ends (the repair finds nothing to fix)."""
    hand_over(range(bucket_map.current().buckets), ALIAS)
    bucket_map.forget()
    real = json_index.insert_select
    raced: list[bytes] = []

    def racing_insert(index, found, alias, added_ids, refused_by):
        if not raced:
            (row,) = json_index.read_batch(index, found, alias, added_ids[0] - 1, added_ids[0], 1)
            entity = Entity.objects.get(id=uuid.UUID(bytes=row.entity_id))
            entity["link"] = "https://example.com/replaced"
            entity.save()
            raced.append(row.entity_id)
            written = real(index, found, alias, added_ids, refused_by)
            insert_index_row(index.name, alias, (*row.values, row.entity_id))
            return written
        return real(index, found, alias, added_ids, refused_by)

    with override_settings(SCHEMALESS={**_settings(), "CODEC": JSON}):
        _posts(30)
        with child.declared(LINK):
            monkeypatch.setattr(json_index, "insert_select", racing_insert)
            Cleaner(indexes=[LINK.name], once=True, batch_size=10).run()
            assert raced
            assert_exact([LINK])
            assert fixed_after_backfill(LINK.name) == 0


def shards_of(entity: Entity) -> str:
    return bucket_map.alias_for(entity.id.bytes)


def _settings() -> dict[str, Any]:
    from django.conf import settings as django_settings

    return dict(django_settings.SCHEMALESS)


def test_rows_for_other_shards_are_streamed_without_a_body_decoded(monkeypatch):
    with override_settings(SCHEMALESS={**_settings(), "CODEC": JSON}):
        _posts(80)
        with child.declared(LINK):
            counts = _counting(monkeypatch)
            summary = Cleaner(indexes=[LINK.name], once=True, batch_size=30).run()
            assert_exact([LINK])
            rows = index_rows(LINK.name)
    assert summary.total("inserted") == 80 == len(rows)
    assert {row[-1] for row in rows} == set(shards.shard_aliases())  # routed to both
    assert counts["read"] >= 3 and counts["in_place"] == 0
    assert counts["decoded"] == 0


def test_messagepack_bodies_keep_todays_path(monkeypatch):
    """The default codec: no server extraction at all (bodies decoded as before)."""
    msgpack = "schemaless_store.values.codec.MsgpackCodec"
    with override_settings(SCHEMALESS={**_settings(), "CODEC": msgpack}):
        _posts(20)
        with child.declared(LINK):
            counts = _counting(monkeypatch)
            Cleaner(indexes=[LINK.name], once=True, batch_size=30).run()
            assert_exact([LINK])
    assert counts["read"] == counts["in_place"] == 0
    assert counts["decoded"] >= 20


@pytest.mark.usefixtures("buckets_restored")
def test_a_chunk_the_fence_refuses_in_place_is_streamed_instead(monkeypatch):
    """A move may take buckets away between the batch's read and its ``INSERT ... SELECT``:
    the statement asks the fence first and writes nothing (None); those rows are then routed
    and written as streamed rows are."""
    hand_over(range(bucket_map.current().buckets), ALIAS)
    bucket_map.forget()
    asked = []

    def refused_insert(*args, **kwargs):
        asked.append(args[3])
        return None

    with override_settings(SCHEMALESS={**_settings(), "CODEC": JSON}):
        _posts(25)
        with child.declared(LINK):
            monkeypatch.setattr(json_index, "insert_select", refused_insert)
            summary = Cleaner(indexes=[LINK.name], once=True, batch_size=10).run()
            assert_exact([LINK])
            assert fixed_after_backfill(LINK.name) == 0
    assert sum(len(ids) for ids in asked) == 25
    assert summary.total("inserted") == 25


def test_a_repair_pass_over_json_bodies_fixes_rows_without_a_body_decoded(monkeypatch):
    """Issue 45, item 3: the cleaner's repair passes use the server's extraction too. A ready
    index with a missing row and a stale one is repaired, the server reading the rows every
    entity implies: no body is decoded in Python."""
    from schemaless_store.cleaner import repairs as repairs_module
    from tests.support.cleaner import passes
    from tests.support.raw import raw_delete

    with override_settings(SCHEMALESS={**_settings(), "CODEC": JSON}):
        entities = _posts(40)
        with child.declared(LINK):
            Cleaner(indexes=[LINK.name], once=True, batch_size=30).run()  # ready
            assert_exact([LINK])
            lost, changed = entities[0], entities[1]
            raw_delete(LINK.name, lost.id.bytes)
            old_link = LINK.column_value("link", "https://example.com/old")
            home = bucket_map.alias_for(LINK.routing_key(old_link))
            insert_index_row(LINK.name, home, (old_link, changed.id.bytes))
            repaired_before = len(passes(index_name=LINK.name, kind="repair"))

            python_rows: list[bytes] = []
            server_reads = {"repair": 0, "sweep": 0}
            newest_first, current = json_index.read_newest_first, json_index.current

            def reading(kind, real):
                def read(*args, **kwargs):
                    server_reads[kind] += 1
                    return real(*args, **kwargs)

                return read

            monkeypatch.setattr(json_index, "read_newest_first", reading("repair", newest_first))
            monkeypatch.setattr(json_index, "current", reading("sweep", current))
            monkeypatch.setattr(
                repairs_module,
                "decode_body",
                lambda body: python_rows.append(body) or decode_body(body),
            )
            summary = Cleaner(indexes=[LINK.name], once=True, batch_size=30).run()
            assert_exact([LINK])
    assert summary.total("inserted") == 1 and summary.total("stale_removed") == 1
    repairs = passes(index_name=LINK.name, kind="repair")[repaired_before:]
    assert repairs and {p.status for p in repairs} == {"done"}
    # The server read the repair's batches and the sweep's entities; Python decoded none.
    assert server_reads["repair"] >= 2 and server_reads["sweep"] >= 1, server_reads
    assert python_rows == []

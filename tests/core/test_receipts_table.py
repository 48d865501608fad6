"""The receipts table (docs/design.md#receipts) on either backend: one receipt per write
transaction, with the result its retry returns; none inside a caller's transaction; removed
in bounded batches once older than the retention; the settings checked. The lost-answer cases
themselves are in test_receipts.py (MariaDB)."""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import transaction
from django.test import override_settings

from schemaless_store.config import conf
from schemaless_store.exceptions import ConfigurationError, OutcomeUnknown, ShardUnavailable
from schemaless_store.models import Cell, Entity
from schemaless_store.tables import receipts as receipt_table
from schemaless_store.topology import shards
from schemaless_store.writes import receipts
from schemaless_store.writes.protocol import Change, Write, run
from tests.support import STORE

pytestmark = STORE


def total() -> int:
    return sum(receipt_table.count(alias) for alias in shards.shard_aliases())


def test_each_write_leaves_one_receipt_with_its_result():
    before = total()
    entity = Entity.objects.create(user_id="u1", n=1)
    assert total() == before + 1
    entity["n"] = 2
    entity.save()
    assert total() == before + 2
    deleted, _ = entity.delete()
    assert deleted == 1
    assert total() == before + 3
    Cell.objects.put(uuid.uuid4(), "profile", {"name": "a"})
    assert total() == before + 4


def test_a_receipt_holds_what_a_retry_returns():
    alias = shards.shard_aliases()[0]
    key = bytes(Entity(user_id="u1").row_id)
    write = Write(alias, [Change(key, rows=set())])

    def store(write: Write) -> dict[str, int]:
        return {"deleted": 7}

    run(write, store)
    assert receipts.recall(write, ShardUnavailable(alias, "lost", lost=True)) == {"deleted": 7}
    other = Write(alias, [Change(key, rows=set())])  # never run: no receipt
    other.receipt_created = int(time.time())  # as a try would have, just now
    assert receipts.recall(other, ShardUnavailable(alias, "lost", lost=True)) is None


def test_a_bulk_put_has_one_receipt_per_shard_batch():
    before = total()
    made = Entity.objects.bulk_put([{"user_id": "u1", "n": i} for i in range(20)], batch_size=4)
    batches = 0
    for alias in shards.shard_aliases():
        here = sum(1 for e in made if e._state.db == alias)
        batches += -(-here // 4)
    assert total() == before + batches


def test_no_receipt_inside_a_callers_transaction():
    entity = Entity.objects.create(user_id="u1", n=1)
    before = total()
    with transaction.atomic(using=entity.shard):
        entity["n"] = 2
        entity.save()
    assert total() == before
    assert Entity.objects.get(id=entity.id)["n"] == 2


def test_asking_again_while_the_shard_is_unreachable_then_unknown(monkeypatch):
    alias = shards.shard_aliases()[0]
    write = Write(alias, [Change(uuid.uuid4().bytes, rows=set())])
    refusals = [ShardUnavailable(alias, "refused")] * 2

    def find(alias: str, write_id: bytes, created: int, *, galera: bool) -> receipt_table.Lookup:
        if refusals:
            raise refusals.pop()
        return receipt_table.Lookup({"written": 1}, 0)

    monkeypatch.setattr(receipt_table, "find", find)
    lost = ShardUnavailable(alias, "lost", lost=True)
    assert receipts.recall(write, lost) == {"written": 1}  # after two refusals
    refusals.extend([ShardUnavailable(alias, "refused")] * 1000)
    quick = override_settings(SCHEMALESS={"BUCKETS": 4096, "RECEIPT_WAIT": 0.05})
    with quick, pytest.raises(OutcomeUnknown) as raised:
        receipts.recall(write, lost)
    assert raised.value.write_id == write.write_id.hex()
    assert "unknown" in str(raised.value)


def test_expired_receipts_are_removed_in_bounded_batches():
    alias = shards.shard_aliases()[0]
    old = int(time.time()) - int(conf.get().receipt_retention) - 10
    fresh = int(time.time())
    conn = shards.connection(alias)
    with transaction.atomic(using=alias), shards.statement_cursor(conn) as cursor:
        for _ in range(receipt_table.REMOVE_BATCH + 5):
            receipt_table.record(cursor, uuid.uuid4().bytes, old, {})
        receipt_table.record(cursor, uuid.uuid4().bytes, fresh, {})
    assert receipts.prune(alias) == receipt_table.REMOVE_BATCH
    assert receipts.prune(alias) == 5
    assert receipts.prune(alias) == 0
    assert receipt_table.count(alias) >= 1  # the fresh one stays


def test_writers_remove_expired_receipts_as_they_write(monkeypatch):
    alias = shards.shard_aliases()[0]
    old = int(time.time()) - int(conf.get().receipt_retention) - 10
    conn = shards.connection(alias)
    with transaction.atomic(using=alias), shards.statement_cursor(conn) as cursor:
        for _ in range(3):
            receipt_table.record(cursor, uuid.uuid4().bytes, old, {})
    monkeypatch.setattr(receipts, "PRUNE_EVERY", 1)
    Entity.objects.bulk_put([{"user_id": "u1", "n": i} for i in range(10)])
    found = shards.read(
        alias, f"SELECT COUNT(*) FROM {receipt_table.TABLE} WHERE created < %s", [old + 1]
    )
    assert found[0][0] == 0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("RECEIPT_RETENTION", 59),
        ("RECEIPT_RETENTION", "1h"),
        ("RECEIPT_RETENTION", True),
        ("RECEIPT_WAIT", -1),
        ("RECEIPT_WAIT", None),
    ],
)
def test_bad_receipt_settings_are_refused(key, value):
    bad = override_settings(SCHEMALESS={"BUCKETS": 4096, key: value})
    with bad, pytest.raises(ConfigurationError, match=key):
        conf.get()

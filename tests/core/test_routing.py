from __future__ import annotations

import uuid

import pytest
from django.db import connections

from schemaless_store.config import conf
from schemaless_store.exceptions import ConfigurationError
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from schemaless_store.values import bucket_hash, index_values
from tests.support import STORE
from tests.support.factories import PostFactory
from tests.support.raw import entity_rows, index_rows


def test_buckets_split_evenly_by_default():
    settings = conf.get()
    assert settings.shards == ("shard_0", "shard_1")
    assert settings.bucket_aliases[0] == "shard_0"
    assert settings.bucket_aliases[2047] == "shard_0"
    assert settings.bucket_aliases[2048] == "shard_1"
    assert settings.bucket_aliases[4095] == "shard_1"


def test_explicit_bucket_map():
    _aliases, owners = conf.bucket_aliases({"shard_0": ["0-9", 20], "shard_1": "10-19"}, 21)
    assert owners[5] == "shard_0" and owners[15] == "shard_1" and owners[20] == "shard_0"


@pytest.mark.parametrize(
    "spec",
    [{"shard_0": "0-10", "shard_1": "10-20"}, {"shard_0": "0-5"}, {"shard_0": "x"}, "shard_0", []],
    ids=["overlap", "gap", "garbage", "string", "empty"],
)
def test_bad_bucket_maps(spec):
    with pytest.raises(ConfigurationError):
        conf.bucket_aliases(spec, 21)


@STORE
def test_entities_and_index_rows_land_on_the_shard_their_bucket_names():
    for _ in range(40):
        e = PostFactory.create()
        expected = conf.get().bucket_aliases[bucket_hash.bucket_of(e.id.bytes, 4096)]
        assert e.shard == expected
        assert e.id.bytes in entity_rows(expected)
        other = next(a for a in shards.shard_aliases() if a != expected)
        assert e.id.bytes not in entity_rows(other)
    for value, _entity_id, alias in index_rows("index_link"):
        assert (
            alias
            == conf.get().bucket_aliases[
                bucket_hash.bucket_of(index_values.encode_key(value), 4096)
            ]
        )


@STORE
def test_a_thousand_entities_spread_fairly():
    Entity.objects.bulk_put([{"user_id": uuid.uuid4().bytes} for _ in range(1000)])
    counts = {alias: len(entity_rows(alias)) for alias in shards.shard_aliases()}
    assert sum(counts.values()) == 1000
    # Binomial(1000, 0.5) stays within 430..570 with probability > 0.99999.
    assert all(430 <= c <= 570 for c in counts.values()), counts
    rows = index_rows("index_user_id")
    per_shard = {a: sum(1 for r in rows if r[-1] == a) for a in shards.shard_aliases()}
    assert all(430 <= c <= 570 for c in per_shard.values()), per_shard


@STORE
def test_default_holds_only_metadata():
    tables = connections["default"].introspection.table_names()
    assert "entities" not in tables
    assert not [t for t in tables if t.startswith("index_")]
    assert "schemaless_store_indexstate" in tables
    for alias in shards.shard_aliases():
        shard_tables = connections[alias].introspection.table_names()
        assert "entities" in shard_tables and "index_link" in shard_tables
        assert "auth_user" not in shard_tables and "schemaless_store_indexstate" not in shard_tables

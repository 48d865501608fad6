"""A shard that is down: fast, named errors; the other shard keeps working; nothing half-written."""

from __future__ import annotations

import time

import pytest
from django.db import connections

from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map
from schemaless_store.values import index_values
from tests.support import STORE
from tests.support.buckets import id_on
from tests.support.outage import shard_down
from tests.support.raw import entity_rows, index_rows

pytestmark = STORE


def link_on(alias: str) -> str:
    n = 0
    while True:
        link = f"https://example.com/{n}"
        if bucket_map.alias_for(index_values.encode_key(index_values.encode_key(link))) == alias:
            return link
        n += 1


@pytest.mark.parametrize("how", ["refused", "blackhole"])
def test_reads_and_writes_needing_the_dead_shard_fail_fast_and_name_it(how, backend):
    if how == "blackhole" and backend == "sqlite":
        pytest.skip("a file database has no network to black-hole; 'refused' covers SQLite")
    on_dead = Entity.objects.create(title="x", id=id_on("shard_1"))
    with shard_down("shard_1", how):
        started = time.monotonic()
        with pytest.raises(ShardUnavailable) as info:
            Entity.objects.get(id=on_dead.id)
        assert info.value.alias == "shard_1"
        assert "shard_1" in str(info.value)
        with pytest.raises(ShardUnavailable):
            Entity.objects.create(title="y", id=id_on("shard_1"))
        with pytest.raises(ShardUnavailable):
            list(Entity.objects.filter_index(user_id__gte=b""))  # scatter-gather needs every shard
        assert time.monotonic() - started < 20  # connect_timeout=1, a few attempts at most


def test_the_other_shard_keeps_working():
    with shard_down("shard_1"):
        alive = Entity.objects.create(title="fine", id=id_on("shard_0"))
        assert Entity.objects.get(id=alive.id)["title"] == "fine"
        link = link_on("shard_0")
        Entity.objects.create(link=link, id=id_on("shard_0"))
        assert len(list(Entity.objects.filter_index(link=link))) == 1


def test_index_shard_down_leaves_no_partial_entity():
    entity_id = id_on("shard_0")
    user = next(
        u
        for u in (bytes([n]) * 4 for n in range(256))
        if bucket_map.alias_for(index_values.encode_key(index_values.encode_key(u))) == "shard_0"
    )
    before = entity_rows("shard_0"), index_rows("index_user_id", "shard_0")
    with shard_down("shard_1"), pytest.raises(ShardUnavailable) as info:
        Entity.objects.create(id=entity_id, link=link_on("shard_1"), user_id=user)
    assert info.value.alias == "shard_1"
    assert (entity_rows("shard_0"), index_rows("index_user_id", "shard_0")) == before
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=entity_id)


@pytest.mark.mariadb_only
def test_a_connection_the_server_killed_is_replaced_for_reads():
    import MySQLdb

    e = Entity.objects.create(title="still here", id=id_on("shard_0"))
    conn = connections["shard_0"]
    conn.ensure_connection()
    victim = conn.connection.thread_id()
    settings = conn.settings_dict
    killer = MySQLdb.connect(host=settings["HOST"], port=int(settings["PORT"]), user="root")
    try:
        killer.query(f"KILL {int(victim)}")
    finally:
        killer.close()
    assert Entity.objects.get(id=e.id)["title"] == "still here"
    assert conn.connection.thread_id() != victim

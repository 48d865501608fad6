"""Read replicas per shard with read-your-writes (issue 19, docs/replicas.md), on real GTID
replicas: ``SCHEMALESS_TEST_DB=mariadb SCHEMALESS_TEST_REPLICAS=1`` starts a replica of each
shard's server (tests/settings.py); scripts/test.sh runs this group once, in a pass of its own.
The configuration checks at the end need no servers and run everywhere."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.db import connections
from django.http import HttpResponse
from django.test import RequestFactory, override_settings
from django.test.utils import CaptureQueriesContext

from schemaless_store.config import conf
from schemaless_store.exceptions import ConfigurationError, UniqueViolation
from schemaless_store.middleware import COOKIE, ReadYourWrites
from schemaless_store.models import Entity
from schemaless_store.topology import replicas, servers, shards
from tests.support import STORE
from tests.support.buckets import id_on

REPLICATED = getattr(settings, "REPLICATED", False)
needs_replicas = pytest.mark.skipif(
    not REPLICATED,
    reason="needs GTID replicas: SCHEMALESS_TEST_DB=mariadb SCHEMALESS_TEST_REPLICAS=1 "
    "(scripts/test.sh runs this group once, in its own pass)",
)


def replica_server(alias: str):
    return settings.REPLICA_SERVERS[shards.shard_aliases().index(alias)]


def replica_alias(alias: str) -> str:
    return f"{alias}_replica_0"


def statements(alias: str, evaluate) -> tuple[object, dict[str, int]]:
    """``evaluate()``'s result, and how many statements the shard and its replica received."""
    names = [alias, replica_alias(alias)]
    captures = {name: CaptureQueriesContext(connections[name]) for name in names}
    for capture in captures.values():
        capture.__enter__()
    try:
        found = evaluate()
    finally:
        for capture in captures.values():
            capture.__exit__(None, None, None)
    return found, {name: len(capture.captured_queries) for name, capture in captures.items()}


@pytest.fixture
def replicated():
    """Replicas checked at every read (no cached health), each replicating and caught up,
    this thread without positions; replication restored afterwards."""
    raw = {**settings.SCHEMALESS, "REPLICA_CHECK_INTERVAL": 0}
    with override_settings(SCHEMALESS=raw):
        replicas.forget_health()
        token = replicas.set_positions({})
        try:
            yield
        finally:
            replicas.reset_positions(token)
            for server in settings.REPLICA_SERVERS:
                if server.process is None or server.process.poll() is not None:
                    server.start()
                server.delay(0)
                server.start_replication()
            for server in settings.REPLICA_SERVERS:
                server.wait_caught_up()
            replicas.forget_health()


pytestmark = [STORE]


@needs_replicas
def test_reads_use_a_replica_only_when_asked(replicated):
    alias = "shard_0"
    made = Entity.objects.create(id=id_on(alias), user_id=b"u" * 16, title="hello")
    replica_server(alias).wait_caught_up()
    replicas.set_positions({})  # as another thread would be: no writes of its own

    def everything():
        return (
            Entity.objects.get(id=made.id)["title"],
            [e["title"] for e in Entity.objects.get_many([made.id]).values()],
        )

    found, counts = statements(alias, everything)
    assert found == ("hello", ["hello"])
    assert counts == {alias: 2, replica_alias(alias): 0}  # the default: primaries only
    with replicas.from_replicas():
        found, counts = statements(alias, everything)
        assert found == ("hello", ["hello"])
        assert counts[alias] == 0 and counts[replica_alias(alias)] >= 2
        with replicas.from_primary():
            _found, counts = statements(alias, everything)
            assert counts[replica_alias(alias)] == 0
    with override_settings(SCHEMALESS={**conf.get().raw, "READ_FROM_REPLICAS": True}):
        _found, counts = statements(alias, everything)
        assert counts[alias] == 0 and counts[replica_alias(alias)] >= 2


@needs_replicas
def test_a_thread_reads_its_own_write_from_a_replica_that_is_behind(replicated):
    alias = "shard_1"
    made = Entity.objects.create(id=id_on(alias), user_id=b"w" * 16, n=1)
    replica_server(alias).wait_caught_up()
    replica_server(alias).delay(30)  # applies each write 30 s late: well, but behind
    made["n"] = 2
    made.save()
    with (
        override_settings(SCHEMALESS={**conf.get().raw, "REPLICA_MAX_LAG": 60}),
        replicas.from_replicas(),
    ):
        # This thread wrote n=2: the replica has not applied it, so the primary answers.
        assert Entity.objects.get(id=made.id)["n"] == 2
        assert [e["n"] for e in Entity.objects.filter_index(user_id=b"w" * 16)] == [2]
        assert [e["n"] for e in Entity.objects.get_many([made.id]).values()] == [2]
        # The negative control: a thread without that position is served by the replica, which
        # still has n=1 (the replica is really read, and really behind).
        token = replicas.set_positions({})
        try:
            found, counts = statements(alias, lambda: Entity.objects.get(id=made.id)["n"])
            assert found == 1 and counts[alias] == 0
        finally:
            replicas.reset_positions(token)
    replica_server(alias).delay(0)
    replica_server(alias).wait_caught_up()
    with replicas.from_replicas():
        found, counts = statements(alias, lambda: Entity.objects.get(id=made.id)["n"])
        assert found == 2 and counts[alias] == 0  # caught up: the replica serves the thread


@needs_replicas
def test_a_write_inside_a_transaction_records_its_position_once_it_commits(replicated):
    from django.db import transaction

    alias = "shard_0"
    replicas.set_positions({})
    with transaction.atomic(using=alias):
        Entity.objects.create(id=id_on(alias), n=1)
        assert alias not in replicas.positions()  # not committed: nothing to wait for yet
    assert alias in replicas.positions()
    replicas.set_positions({})
    with transaction.atomic(using=alias):
        Entity.objects.create(id=id_on(alias), n=2)
        transaction.set_rollback(True, using=alias)
    assert alias not in replicas.positions()  # rolled back: no position


@needs_replicas
def test_a_stopped_replica_is_not_read_and_the_operator_sees_why(replicated):
    alias = "shard_0"
    made = Entity.objects.create(id=id_on(alias), n=1)
    replica_server(alias).wait_caught_up()
    replica_server(alias).stop_replication()
    made["n"] = 2
    made.save()
    replicas.set_positions({})  # even a thread that wrote nothing: the replica is not read
    with replicas.from_replicas():
        found, counts = statements(alias, lambda: Entity.objects.get(id=made.id)["n"])
    assert found == 2 and counts[alias] == 1
    health = replicas.health(replica_alias(alias))
    assert not health.usable and "stopped" in health.state


@needs_replicas
def test_a_lagging_replica_answers_only_once_it_has_applied_the_write(replicated):
    alias = "shard_0"
    replica_server(alias).delay(3)
    made = Entity.objects.create(id=id_on(alias), user_id=b"l" * 16, n=1)
    with override_settings(SCHEMALESS={**conf.get().raw, "REPLICA_MAX_LAG": 60}):
        with replicas.from_replicas():
            found, counts = statements(alias, lambda: Entity.objects.get(id=made.id)["n"])
            assert found == 1 and counts[alias] == 1  # not applied yet: the primary read it
        with (
            override_settings(SCHEMALESS={**conf.get().raw, "REPLICA_WAIT": 10}),
            replicas.from_replicas(),
        ):
            # Waiting for the replica (MASTER_GTID_WAIT) instead of going to the primary.
            found, counts = statements(alias, lambda: Entity.objects.get(id=made.id)["n"])
            assert found == 1 and counts[alias] == 0


@needs_replicas
def test_a_replica_lagging_past_the_bound_is_not_read(replicated):
    alias = "shard_1"
    server = replica_server(alias)
    server.delay(4)
    Entity.objects.create(id=id_on(alias), n=0)
    deadline = time.monotonic() + 20
    while (server.lag_seconds() or 0) < 2 and time.monotonic() < deadline:
        Entity.objects.create(id=id_on(alias), n=0)
        time.sleep(0.2)
    assert (server.lag_seconds() or 0) >= 2
    with override_settings(SCHEMALESS={**conf.get().raw, "REPLICA_MAX_LAG": 1}):
        replicas.set_positions({})
        health = replicas.health(replica_alias(alias), refresh=True)
        assert not health.usable and "lagging" in health.state and health.lag >= 2
        made = Entity.objects.create(id=id_on(alias), n=7)
        replicas.set_positions({})
        with replicas.from_replicas():
            found, counts = statements(alias, lambda: Entity.objects.get(id=made.id)["n"])
        assert found == 7 and counts[alias] == 1  # the primary read it (the replica: checks)


@needs_replicas
def test_a_dead_replica_costs_no_error_and_is_read_again_once_back(replicated):
    alias = "shard_0"
    made = Entity.objects.create(id=id_on(alias), user_id=b"d" * 16, n=5)
    server = replica_server(alias)
    server.wait_caught_up()
    replicas.set_positions({})
    with replicas.from_replicas():
        assert statements(alias, lambda: Entity.objects.get(id=made.id))[1][alias] == 0
        server.kill()
        found, counts = statements(alias, lambda: Entity.objects.get(id=made.id)["n"])
        assert found == 5 and counts[alias] >= 1
        assert [e["n"] for e in Entity.objects.filter_index(user_id=b"d" * 16)] == [5]
        assert "unreachable" in replicas.health(replica_alias(alias)).state
        server.start()
        server.wait_caught_up()
        # Caught up is not yet replicating: with nothing new to fetch, the IO thread may
        # still be reconnecting ("Connecting"), which the store's check counts as stopped
        # (CI met it once, under load). Read once the store's own check says it is well.
        deadline = time.monotonic() + 30
        while not replicas.health(replica_alias(alias), refresh=True).usable:
            assert time.monotonic() < deadline, replicas.health(replica_alias(alias)).state
            time.sleep(0.1)
        replicas.forget_health()
        found, counts = statements(alias, lambda: Entity.objects.get(id=made.id)["n"])
        assert found == 5 and counts[alias] == 0


@needs_replicas
def test_writes_and_unique_claims_read_the_primary_whatever_is_asked(replicated):
    for server in settings.REPLICA_SERVERS:
        server.stop_replication()
    with replicas.from_replicas():
        Entity.objects.create(username="taken-by-first")
        with pytest.raises(UniqueViolation):
            Entity.objects.create(username="taken-by-first")  # the replica has no claim yet
        made = Entity.objects.create(n=1)
        made["n"] = 2
        made.save()  # the write's locked read is on the primary: no stale version
        assert Entity.objects.get(id=made.id)["n"] == 2


@needs_replicas
def test_the_middleware_carries_a_user_s_positions_to_the_next_request(replicated):
    alias = "shard_1"
    made = Entity.objects.create(id=id_on(alias), n=1)
    replica_server(alias).wait_caught_up()
    replica_server(alias).delay(30)
    replicas.set_positions({})
    factory = RequestFactory()

    def write(request):
        made["n"] = 2
        made.save()
        return HttpResponse("ok")

    def read(request):
        with replicas.from_replicas():
            return HttpResponse(str(Entity.objects.get(id=made.id)["n"]))

    first = ReadYourWrites(write)(factory.post("/"))
    assert COOKIE in first.cookies
    assert replicas.positions() == {}  # the request's positions did not leak into the thread
    later = factory.get("/")
    later.COOKIES[COOKIE] = first.cookies[COOKIE].value
    with override_settings(SCHEMALESS={**conf.get().raw, "REPLICA_MAX_LAG": 60}):
        assert ReadYourWrites(read)(later).content == b"2"  # the primary: the replica is behind
        stranger = ReadYourWrites(read)(factory.get("/"))  # another user: no positions
        assert stranger.content == b"1"  # served by the lagging replica: bounded staleness
        tampered = factory.get("/")
        tampered.COOKIES[COOKIE] = first.cookies[COOKIE].value[:-2] + "xx"
        assert ReadYourWrites(read)(tampered).content == b"1"  # a bad signature carries nothing


@needs_replicas
def test_the_admin_shows_each_replica_with_its_state(replicated, admin_client):
    replica_server("shard_1").stop_replication()
    page = admin_client.get("/admin/schemaless_store/bucketmove/").content.decode()
    assert 'id="replicas"' in page
    assert "shard_0_replica_0" in page and "replicating" in page
    assert "shard_1_replica_0" in page and "replication stopped" in page


# --- configuration (no servers needed) ----------------------------------------------------------


def test_replica_settings_are_checked():
    cases = [
        ({"REPLICAS": ["x"]}, "must be a dict"),
        ({"REPLICAS": {"nope": ["default"]}}, "'nope', which is not a shard"),
        ({"REPLICAS": {"shard_0": "r"}}, "must be a list of aliases"),
        ({"REPLICAS": {"shard_0": ["missing"]}}, "'missing', which is not in DATABASES"),
        (
            {"SHARDS": ["shard_0", "shard_1"], "REPLICAS": {"shard_0": ["shard_1"]}},
            "a replica serves one shard",
        ),
        ({"READ_FROM_REPLICAS": "yes"}, "READ_FROM_REPLICAS"),
        ({"REPLICA_MAX_LAG": -1}, "REPLICA_MAX_LAG"),
        ({"REPLICA_WAIT": "1"}, "REPLICA_WAIT"),
    ]
    for extra, message in cases:
        with (
            override_settings(SCHEMALESS={**settings.SCHEMALESS, **extra}),
            pytest.raises(ConfigurationError, match=message),
        ):
            conf.get()
            pytest.fail(f"{extra} was accepted")


def test_replica_urls_make_aliases_and_the_replicas_setting():
    from schemaless_store.config.dburls import replicas_from_urls

    found, named = replicas_from_urls(
        [
            "shard_0=mysql://u@h1:3306/s0",
            "shard_0=mysql://u@h2:3306/s0",
            "shard_1=mysql://u@h3/s1",
        ]
    )
    assert named == {
        "shard_0": ["shard_0_replica_0", "shard_0_replica_1"],
        "shard_1": ["shard_1_replica_0"],
    }
    assert found["shard_0_replica_1"]["HOST"] == "h2" and found["shard_1_replica_0"]["NAME"] == "s1"
    with pytest.raises(ValueError, match="shard_0=mysql://host/db"):
        replicas_from_urls(["mysql://u@h1/s0"])


def test_gtid_positions_compare_per_domain():
    applied = replicas.parse_position("0-1-57,1-2-9")
    assert applied == {0: 57, 1: 9}
    assert replicas.covers(applied, {0: 57}) and replicas.covers(applied, {1: 3})
    assert not replicas.covers(applied, {0: 58}) and not replicas.covers(applied, {2: 1})
    assert replicas.covers(applied, {})


def test_batches_stay_under_a_galera_write_set_limit(monkeypatch):
    """Where a shard's cluster limits the rows of a write set (wsrep_max_ws_rows), the
    cleaner's index-row statements and a move's copy batches stay under it."""
    from schemaless_store.cleaner import repairs
    from schemaless_store.config.metadata import BucketMove
    from schemaless_store.moves.mover import Mover

    limits = {"shard_0": None, "shard_1": 120}
    monkeypatch.setattr(servers, "write_set_limit", lambda alias: limits.get(alias))
    assert repairs.insert_chunk() == 120
    move = BucketMove(target="shard_1", buckets=[[0, 9]], sources={"shard_0": [[0, 9]]})
    assert Mover(move, batch=1000).batch == 120
    limits["shard_1"] = None
    assert repairs.insert_chunk() == repairs.INSERT_CHUNK
    assert Mover(move, batch=1000).batch == 1000


@pytest.mark.mariadb_only
def test_a_server_without_galera_has_no_write_set_limit():
    assert all(servers.write_set_limit(alias) is None for alias in shards.shard_aliases())


def test_galera_urls_list_the_nodes_and_bad_ones_are_refused():
    from schemaless_store.config.dburls import database_from_url

    config = database_from_url("galera://app:pw@h1:3306,h2:3307,h3/shard2?connect_timeout=1")
    assert config["ENGINE"] == "schemaless_store.backends.galera"
    assert config["OPTIONS"]["nodes"] == ["h1:3306", "h2:3307", "h3"]
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("h1", 3306, "shard2")
    assert config["OPTIONS"]["connect_timeout"] == 1 and config["OPTIONS"]["charset"] == "utf8mb4"
    for bad in ("galera://app@/shard2", "galera://app@h1:3306,h2:3306"):
        with pytest.raises(ValueError, match="galera://user@node1:3306,node2:3306/database"):
            database_from_url(bad)

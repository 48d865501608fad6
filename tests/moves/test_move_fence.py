"""A move's fence (issue 34, items 11 and 12; docs/design.md#the-fence): one round of ending
sessions per source and move, a resumed mover's included.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import MySQLdb
import pytest
from django.core.management import CommandError
from django.db import connections

from schemaless_store import checks
from schemaless_store.config.metadata import BucketMove
from schemaless_store.guards import fence
from tests.support import STORE
from tests.support.moving import (
    MOVED,
    assert_moved_and_exact,
    dies_at,
    populate,
    run,
    source_and_target,
)

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def counted_fences(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = fence.withdraw

    def withdraw(alias, buckets, state, *, end_connections=False):
        calls.append(alias)
        return real(alias, buckets, state, end_connections=end_connections)

    monkeypatch.setattr(fence, "withdraw", withdraw)
    return calls


def test_a_move_fences_each_source_once(monkeypatch):
    made = populate(20)
    source, target = source_and_target()
    calls = counted_fences(monkeypatch)
    run("--to", target, "--buckets", MOVED)
    assert calls == [source]
    assert BucketMove.objects.get().phase == "done"
    assert_moved_and_exact(made, target)


def test_a_mover_resumed_after_the_fence_fences_once_more(monkeypatch):
    """The mover dies once the fence is recorded: the one that resumes cannot know whether
    the kill happened, and ends the sessions again, once."""
    made = populate(20)
    source, target = source_and_target()

    dies_at(monkeypatch, "flip", "--to", target, "--buckets", MOVED)
    assert BucketMove.objects.get().phase == "fenced"
    calls = counted_fences(monkeypatch)
    assert "Resuming move" in run("--to", target, "--buckets", MOVED)
    assert calls == [source]
    assert_moved_and_exact(made, target)


# --- every session, whatever its user (MySQL) ---------------------------------------------------


def root(alias: str) -> Any:
    """A session of the server's root (the suite's servers), outside the store."""
    settings = connections[alias].settings_dict
    return MySQLdb.connect(
        host=settings["HOST"], port=int(settings["PORT"]), user="root", connect_timeout=5
    )


@contextlib.contextmanager
def other_user(alias: str, name: str, *grants: str) -> Iterator[tuple[str, str]]:
    """A database user ``name`` with every privilege on ``alias``'s database, and ``grants``;
    dropped afterwards."""
    database = connections[alias].settings_dict["NAME"]
    admin = root(alias)
    cursor = admin.cursor()
    cursor.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY 'pw-{name}'")
    try:
        cursor.execute(f"GRANT ALL PRIVILEGES ON `{database}`.* TO '{name}'@'%'")
        for grant in grants:
            cursor.execute(f"GRANT {grant} ON *.* TO '{name}'@'%'")
        yield name, f"pw-{name}"
    finally:
        cursor.execute(f"DROP USER IF EXISTS '{name}'@'%'")
        admin.close()


def session_as(alias: str, user: str, password: str) -> Any:
    settings = connections[alias].settings_dict
    connection = MySQLdb.connect(
        host=settings["HOST"],
        port=int(settings["PORT"]),
        user=user,
        passwd=password,
        db=settings["NAME"],
        connect_timeout=5,
    )
    connection.autocommit(False)
    return connection


def alive(connection: Any) -> bool:
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT 1")
        cursor.fetchall()
        return True
    except MySQLdb.OperationalError:
        return False


@pytest.mark.mariadb_only
def test_the_fence_ends_a_session_of_another_user_on_the_source():
    """An application that writes as another database user than the mover's: its session on
    the source's database is ended too, its open transaction rolled back."""
    source, _target = source_and_target()
    with other_user(source, "moves34_app") as (user, password):
        app = session_as(source, user, password)
        try:
            app.cursor().execute("SELECT COUNT(*) FROM entities FOR UPDATE")
            elsewhere = session_as(source, user, password)
            elsewhere.select_db("information_schema")  # not on the store's database: kept
            fence.end_other_connections(source)
            assert not alive(app)
            assert alive(elsewhere)
            elsewhere.close()
        finally:
            app.close()


@contextlib.contextmanager
def connecting_as(alias: str, user: str, password: str) -> Iterator[None]:
    """The store reaches ``alias`` as ``user`` meanwhile (every connection opened since)."""
    dicts = [connections[alias].settings_dict, connections.settings[alias]]
    saved = [(d, d.get("USER"), d.get("PASSWORD")) for d in dicts]
    connections[alias].close()
    for settings in dicts:
        settings.update(USER=user, PASSWORD=password)
    try:
        yield
    finally:
        connections[alias].close()
        for settings, old_user, old_password in saved:
            settings.update(USER=old_user, PASSWORD=old_password)


@pytest.mark.mariadb_only
def test_a_mover_whose_user_may_not_end_other_users_sessions_refuses_to_start():
    """Without PROCESS and CONNECTION ADMIN the fence could not see or end the sessions of
    other users: the move refuses before it records or changes anything, and says which
    grant fixes it; check E008 says the same. With the grants the move may start."""
    populate(10)
    source, target = source_and_target()
    with (
        other_user(source, "moves34_weak") as (user, password),
        connecting_as(source, user, password),
    ):
        with pytest.raises(CommandError) as info:
            run("--to", target, "--buckets", MOVED)
        said = str(info.value)
        assert "nothing was changed" in said
        assert "lacks PROCESS and CONNECTION ADMIN or SUPER" in said
        assert "GRANT PROCESS, CONNECTION ADMIN ON *.* TO 'moves34_weak'" in said
        assert not BucketMove.objects.exists()
        found = checks.check_fence_privileges(databases=[source])
        assert [e.id for e in found] == ["schemaless.E008"]
        assert "lacks PROCESS and CONNECTION ADMIN or SUPER" in found[0].msg
        assert "GRANT PROCESS, CONNECTION ADMIN" in found[0].hint
    with (
        other_user(source, "moves34_fencer", "PROCESS, CONNECTION ADMIN") as (user, password),
        connecting_as(source, user, password),
    ):
        assert fence.unready(source) is None
        assert checks.check_fence_privileges(databases=[source]) == []


@pytest.mark.mariadb_only
def test_a_cluster_member_whose_address_is_not_listed_refuses_the_fence(monkeypatch):
    """The cluster's own list of members' addresses (``wsrep_incoming_addresses``) against the
    shard's configured nodes, names resolved: a member not listed refuses, even when the sizes
    agree. (The suite's Galera nodes report ``AUTO``; the answers are given here.)"""
    from schemaless_store.sql import sessions

    source, _target = source_and_target()
    port = int(connections[source].settings_dict["PORT"])
    reported = {"addresses": [f"localhost:{port}"]}
    monkeypatch.setattr(sessions, "galera_members", lambda cursor: len(reported["addresses"]))
    monkeypatch.setattr(sessions, "galera_addresses", lambda cursor: reported["addresses"])
    assert fence.unready(source) is None  # localhost is the listed 127.0.0.1
    reported["addresses"] = [f"127.0.0.1:{port}", "10.255.0.9:3306"]
    problem = fence.unready(source)
    assert problem is not None and "10.255.0.9:3306" in problem and "2 member(s)" in problem
    reported["addresses"] = ["10.255.0.9:3306"]  # as many members as nodes, but another one
    problem = fence.unready(source)
    assert problem is not None and "lists 1 Galera node(s)" in problem


@pytest.mark.mariadb_only
def test_a_session_on_another_database_writing_the_shard_by_qualified_name_is_ended(
    monkeypatch,
):
    """A session whose current database is not the shard's (a tool writing
    ``<shard database>.entities`` by its qualified name; issue 43) with a transaction open
    that wrote rows: the fence ends it as it ends the sessions on the shard's database, so
    its write cannot commit after the flip (it used to: the move was then held, or, after the
    verdict, the write was lost with the sources' copies). A session elsewhere with nothing
    written is kept (lock connections: the test above)."""
    from schemaless_store.moves.mover import Mover
    from schemaless_store.topology import bucket_map
    from tests.support.moving import MOVED_SET

    made = populate(20)
    source, target = source_and_target()
    database = connections[source].settings_dict["NAME"]
    moved, other = [i for i in made if bucket_map.bucket_for(i.bytes) in MOVED_SET][:2]
    tool = root(source)  # no current database
    tool.autocommit(False)
    catch_up, verify = Mover.catch_up, Mover.verify
    seen = {}

    def tool_writes_then_catch_up(mover):
        cursor = tool.cursor()
        cursor.execute(f"SELECT body FROM `{database}`.entities WHERE id = %s", [other.bytes])
        body = cursor.fetchone()[0]
        cursor.execute(
            f"UPDATE `{database}`.entities SET body = %s WHERE id = %s", [body, moved.bytes]
        )
        catch_up(mover)

    def after_the_flip(mover):
        seen["alive"] = alive(tool)
        if seen["alive"]:
            tool.commit()  # what an unended session could do: commit after the flip
        verify(mover)

    monkeypatch.setattr(Mover, "catch_up", tool_writes_then_catch_up)
    monkeypatch.setattr(Mover, "verify", after_the_flip)
    try:
        run("--to", target, "--buckets", MOVED)
    finally:
        tool.close()
    assert seen == {"alive": False}
    assert BucketMove.objects.get().phase == "done"
    assert_moved_and_exact(made, target)  # the tool's write was rolled back with its session

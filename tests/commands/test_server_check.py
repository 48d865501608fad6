"""System check ``schemaless.E007`` (docs/checks.md): every MySQL-backed database of the store
is MariaDB at least as new as the oldest tested one, 10.11.

The faked servers set the connection's ``vendor``, ``mysql_is_mariadb`` and ``mysql_version``
in the instance's ``__dict__`` (where Django's cached properties keep them), and run without
database access: pytest-django refuses any connection there, so these tests also show that the
check reads only what the connection says about its server.
"""

from __future__ import annotations

import io
import re
import threading

import pytest
from django.conf import settings
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import BaseCommand, SystemCheckError
from django.db import OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from schemaless_store import checks
from schemaless_store.config import server_support


def fake_server(monkeypatch: pytest.MonkeyPatch, alias: str, mariadb: bool, version) -> None:
    """Make ``alias``'s connection report this server, without connecting."""
    state = connections[alias].__dict__
    monkeypatch.setitem(state, "vendor", "mysql")
    monkeypatch.setitem(state, "mysql_is_mariadb", mariadb)
    monkeypatch.setitem(state, "mysql_version", version)


@pytest.mark.parametrize(
    ("mariadb", "version", "shown"),
    [(False, (8, 0, 36), "MySQL 8.0.36"), (True, (10, 5, 27), "MariaDB 10.5.27")],
)
@pytest.mark.parametrize("alias", ["shard_1", "default"])
def test_mysql_and_old_mariadb_are_refused(monkeypatch, alias, mariadb, version, shown):
    fake_server(monkeypatch, alias, mariadb, version)
    (error,) = checks.check_servers(databases=[alias])
    assert error.id == "schemaless.E007"
    assert error.msg == f"database {alias!r} is {shown}: the store needs MariaDB >= 10.11"
    for needed in ("@@last_gtid", "@@gtid_slave_pos", "MASTER_GTID_WAIT", "no MySQL server"):
        assert needed in error.hint


@pytest.mark.parametrize("version", [(10, 11, 0), (10, 11, 19), (11, 4, 2)])
def test_tested_mariadb_and_newer_pass(monkeypatch, version):
    fake_server(monkeypatch, "shard_0", True, version)
    assert checks.check_servers(databases=["shard_0"]) == []


def test_only_the_aliases_given_are_checked(monkeypatch):
    """As Django's own database checks: ``check --database ALIAS`` and ``migrate`` name them."""
    fake_server(monkeypatch, "shard_1", False, (8, 0, 36))
    fake_server(monkeypatch, "shard_0", True, (10, 11, 19))
    assert checks.check_servers(databases=["shard_0"]) == []
    assert [e.msg for e in checks.check_servers(databases=["shard_0", "shard_1"])] == [
        "database 'shard_1' is MySQL 8.0.36: the store needs MariaDB >= 10.11"
    ]


def test_a_plain_check_reads_no_server(monkeypatch):
    """A plain ``manage.py check`` (no databases named) passes over every store database, as
    Django's own database checks do: the connection receiver refuses a bad server instead."""
    fake_server(monkeypatch, "shard_0", True, (10, 11, 19))
    fake_server(monkeypatch, "shard_1", False, (8, 0, 36))
    fake_server(monkeypatch, "default", True, (10, 5, 27))
    assert checks.check_servers(databases=None) == []
    assert checks.check_servers(databases=[]) == []


# Django's MySQL backend reads these of its server once per connection object.
SERVER_FACTS = ("mysql_server_data", "mysql_server_info", "mysql_is_mariadb", "mysql_version")


def unreachable(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every database unreachable: a connection attempt is recorded (the list returned) and
    fails as a server that does not answer does. Attempts by threads that were already running
    are not recorded: one an earlier test left behind (a pool's, a lease renewer's) may try
    meanwhile. This thread's, and those of any thread started from now on, are."""
    tried: list[str] = []
    earlier = {thread.ident for thread in threading.enumerate()} - {threading.get_ident()}

    def refuse(self: BaseDatabaseWrapper) -> None:
        if threading.get_ident() not in earlier:
            tried.append(self.alias)
        raise OperationalError(f"{self.alias}: cannot connect (the test's unreachable server)")

    for alias in settings.DATABASES:
        connections[alias].close()
        for cached in SERVER_FACTS:  # what a connection read of its server, once
            monkeypatch.delitem(connections[alias].__dict__, cached, raising=False)
    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", refuse)
    return tried


def run_checks_of(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The system checks ``manage.py NAME`` runs before its work (its work left out)."""
    command = load_command_class(get_commands()[name], name)
    if name == "runserver":  # it runs them inside its server loop, with these arguments
        options = {"skip_checks": False}
        command.check(**BaseCommand.get_check_kwargs(command, options), display_num_errors=True)
        return
    out = {"stdout": io.StringIO(), "stderr": io.StringIO()}
    if name == "check":  # its work is the checks
        call_command(command, **out)
        return
    monkeypatch.setattr(type(command), "handle", lambda self, *args, **options: None)
    call_command(command, skip_checks=False, **out)


@pytest.mark.parametrize("name", ["check", "runcleaner", "movebuckets", "runserver"])
def test_only_the_commands_that_name_databases_connect_for_the_checks(monkeypatch, name):
    """An unreachable store database costs these commands nothing (no connect_timeout): the
    checks they run connect to no database. ``check --database``, ``migrate`` and
    ``migrateall`` do (below)."""
    tried = unreachable(monkeypatch)
    run_checks_of(name, monkeypatch)
    assert tried == []


@pytest.mark.mariadb_only
def test_check_database_connects_to_the_server_it_names(monkeypatch):
    """The other side of the reach: named with ``--database``, the server is read, and one
    that cannot be reached raises, as in Django's own database checks."""
    tried = unreachable(monkeypatch)
    with pytest.raises(OperationalError, match="shard_1: cannot connect"):
        call_command("check", databases=["shard_1"], stdout=io.StringIO())
    # Only the server named. How many times is not the point: each check that reads the
    # server tries it (the layout's, unless a connection already read it; the server's own),
    # and the Django 6.1 pass of CI saw three.
    assert set(tried) == {"shard_1"}


@pytest.mark.parametrize(
    ("info", "refused"),
    [
        ("8.0.36", "database 'shard_1' is MySQL 8.0.36: the store needs MariaDB >= 10.11"),
        ("10.5.27-MariaDB-1:10.5.27+maria~deb11", "is MariaDB 10.5.27: the store needs"),
        ("5.5.5-10.6.12-MariaDB-log", "is MariaDB 10.6.12: the store needs"),
        ("10.11.19-MariaDB-0+deb12u1", None),
        ("11.4.2-MariaDB", None),
    ],
)
def test_a_connection_to_an_unsupported_server_is_refused_as_it_opens(info, refused):
    """The ``connection_created`` receiver reads the handshake's server string: a process that
    never ran the checks fails on its first connection with check E007's sentence, not with an
    SQL error on its first write."""

    class Driver:
        def get_server_info(self) -> str:
            return info

    class Connection:
        vendor = "mysql"
        alias = "shard_1"
        connection = Driver()
        closed = False

        def close(self) -> None:
            self.closed = True

    conn = Connection()
    if refused is None:
        server_support.refuse_unsupported(sender=None, connection=conn)
        assert not conn.closed
        return
    with pytest.raises(server_support.UnsupportedServer) as raised:
        server_support.refuse_unsupported(sender=None, connection=conn)
    assert refused in str(raised.value) and "(schemaless.E007)" in str(raised.value)
    assert "MASTER_GTID_WAIT" in str(raised.value)
    assert conn.closed


@pytest.mark.skipif(settings.BACKEND != "sqlite", reason="the SQLite pass's own databases")
def test_sqlite_databases_are_not_connected():
    """Nothing to check on SQLite: no connection is opened (this test has no database access,
    so a connection would fail it)."""
    assert checks.check_servers(databases=list(settings.DATABASES)) == []
    assert checks.check_servers(databases=None) == []


@pytest.mark.django_db(databases="__all__")
def test_manage_py_check_fails_on_mysql(monkeypatch):
    fake_server(monkeypatch, "shard_1", False, (8, 0, 36))
    with pytest.raises(SystemCheckError) as raised:
        call_command("check", databases=["shard_1"])
    assert "schemaless.E007" in str(raised.value)
    assert "database 'shard_1' is MySQL 8.0.36: the store needs MariaDB >= 10.11" in str(
        raised.value
    )


@pytest.mark.django_db(databases="__all__")
def test_migrate_stops_at_the_check_on_mysql(monkeypatch):
    """``migrate`` (and so ``migrateall``) runs the check for the alias it migrates: a store
    pointed at MySQL stops there, before any statement of the store runs on it."""
    fake_server(monkeypatch, "shard_1", False, (8, 0, 36))
    with pytest.raises(SystemCheckError, match=r"schemaless\.E007"):
        call_command(
            "migrate", database="shard_1", verbosity=0, interactive=False, skip_checks=False
        )


@pytest.mark.django_db(databases="__all__")
def test_migrateall_checks_every_database_before_it_migrates_any(monkeypatch):
    fake_server(monkeypatch, "shard_1", True, (10, 5, 27))
    migrated = []
    monkeypatch.setattr(
        "schemaless_store.management.commands.migrateall.call_command",
        lambda *args, **kwargs: migrated.append(kwargs["database"]),
    )
    with pytest.raises(SystemCheckError, match=re.escape("database 'shard_1' is MariaDB 10.5.27")):
        call_command("migrateall", verbosity=0, skip_checks=False)
    assert migrated == []  # not even default, which comes first


@pytest.mark.mariadb_only
@pytest.mark.django_db(databases="__all__")
def test_the_test_servers_pass():
    """The servers the suite runs on are read from their connections, and pass."""
    aliases = list(settings.DATABASES)
    assert checks.check_servers(databases=aliases) == []
    for alias in aliases:
        assert connections[alias].mysql_is_mariadb
        assert tuple(connections[alias].mysql_version) >= server_support.OLDEST_MARIADB
    call_command("check", databases=aliases)


@pytest.mark.mariadb_only
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_real_connection_is_refused_when_the_server_is_too_old(monkeypatch):
    """The receiver is connected: with the oldest supported version raised above the test
    server's, a new connection of the store is refused, and ``check --database`` says so."""
    monkeypatch.setattr(server_support, "OLDEST_MARIADB", (99, 0))
    connections["shard_1"].close()
    try:
        with pytest.raises(
            server_support.UnsupportedServer, match=re.escape("needs MariaDB >= 99.0")
        ):
            connections["shard_1"].ensure_connection()
        refused = checks.check_servers(databases=["shard_1"])
        assert "database 'shard_1' is MariaDB" in " ".join(e.msg for e in refused)
    finally:
        monkeypatch.undo()
        connections["shard_1"].close()
    connections["shard_1"].ensure_connection()


@pytest.mark.mariadb_only
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_check_database_fails_on_a_real_server_nobody_can_reach():
    """A real server that does not answer (a port nothing listens on): a plain check passes
    (it never asks, test_only_the_commands_that_name_databases_connect_for_the_checks);
    ``check --database`` asks, and fails."""
    connection = connections["shard_1"]
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = 1  # nothing listens there
    for cached in SERVER_FACTS:
        connection.__dict__.pop(cached, None)
    try:
        call_command("check", stdout=io.StringIO())
        with pytest.raises(OperationalError):
            call_command("check", databases=["shard_1"], stdout=io.StringIO())
    finally:
        connection.settings_dict["PORT"] = port
        connection.close()

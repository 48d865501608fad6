"""The throwaway MariaDB servers keep all their files under their own temporary root."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

from schemaless_store.testing.mariadb import (
    LOWEST_PORT,
    MariaDBServer,
    ServerError,
    _bindable,
    _ephemeral_ports,
    free_port,
)
from tests.support import STORE

pytestmark = [STORE, pytest.mark.mariadb_only]


def test_servers_use_their_own_tmpdir() -> None:
    for server, alias in zip(settings.MARIADB_SERVERS, ("shard_0", "shard_1"), strict=True):
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT @@tmpdir")
            tmpdir = Path(cursor.fetchone()[0])
        assert tmpdir == server.tmpdir
        assert tmpdir.is_dir()
        assert server.root in tmpdir.parents
        assert Path("/tmp") != tmpdir


def test_free_ports_are_not_ephemeral() -> None:
    """The kernel hands outgoing connections their local port from its ephemeral range: a
    server port picked there could be held by one of them when the server binds it."""
    low, _ = _ephemeral_ports()
    ports = {free_port() for _ in range(50)}
    if low - LOWEST_PORT >= 1000:
        assert all(LOWEST_PORT <= port < low for port in ports), sorted(ports)
        assert len(ports) > 40  # picked at random, not one after another
    else:  # no room below the range: the kernel's pick, free all the same
        assert all(_bindable(port) for port in ports)


def test_a_server_whose_port_was_taken_picks_another(tmp_path: Path) -> None:
    """Another process may bind a picked port before the server does (two test lanes started
    together): a server that has never run picks new ports and starts; one that has run keeps
    its port and reports the failure."""
    first = settings.MARIADB_SERVERS[0]
    assert first.template is not None
    server = MariaDBServer(tmp_path, "taken", buffer_pool="16M")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        server.port = taken
        try:
            server.start(template=first.template)
            assert server.port != taken
            assert server.query("SELECT 1 AS one") == [{"one": 1}]
            server.stop(remove=False)
            server.port = taken  # it has run: its port is known to others and stays
            with pytest.raises(ServerError, match="Address already in use"):
                server.start()
            assert server.port == taken
        finally:
            server.stop()


def test_a_server_whose_port_another_mariadbd_answers_on_picks_another(tmp_path: Path) -> None:
    """A port taken by another throwaway server answers the readiness probe as root, as ours
    would: the server checks that the answer comes from its own datadir before it counts as
    started."""
    first = settings.MARIADB_SERVERS[0]
    server = MariaDBServer(tmp_path, "answered", buffer_pool="16M")
    server.port = first.port
    try:
        server.start(template=first.template)
        assert server.port != first.port
        datadir = server.query("SELECT @@datadir AS d")[0]["d"]
        assert Path(datadir).resolve() == server.datadir.resolve()
    finally:
        server.stop()

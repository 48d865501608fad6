"""``movebuckets`` survives a lost connection the way writes do: it reconnects, takes its lock
again and resumes the move from its record within the same run; a fatal error ends in one plain
line, never a driver's traceback (issue 37)."""

from __future__ import annotations

import io
from typing import Any
from unittest import mock

import pytest
from django.core.management import CommandError, call_command
from django.db import Error as DjangoError
from django.db import InterfaceError, OperationalError, ProgrammingError, connections

from schemaless_store.config.metadata import BucketMove
from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.guards.server_lock import ServerLock
from schemaless_store.moves import decide
from schemaless_store.moves.mover import Mover
from schemaless_store.sql.server_errors import CR_SERVER_GONE_ERROR
from tests.support import STORE
from tests.support.moving import MOVED, assert_moved_and_exact, populate, run, source_and_target

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]

GONE = OperationalError(CR_SERVER_GONE_ERROR, "Server has gone away")


def _failing_once(phase: str, exc: BaseException) -> tuple[Any, list[str]]:
    """``Mover.<phase>`` that raises ``exc`` on its first call, then runs."""
    real = getattr(Mover, phase)
    calls: list[str] = []

    def step(self: Mover) -> None:
        calls.append(self.move.phase)
        if len(calls) == 1:
            raise exc
        real(self)

    return step, calls


@pytest.mark.parametrize(
    "exc",
    [ShardUnavailable("shard_0", "Lost connection to server during query", lost=True), GONE],
    ids=["shard-lost", "default-gone"],
)
def test_a_lost_connection_mid_move_is_resumed_within_the_same_run(exc):
    made = populate(30)
    _source, target = source_and_target()
    step, calls = _failing_once("catch_up", exc)
    with mock.patch.object(Mover, "catch_up", step):
        text = run("--to", target, "--buckets", MOVED)
    assert "Connection lost (" in text
    assert "reconnecting and resuming move #" in text
    assert "(resume 1 of 5)" in text
    assert f"done: 0-299 now on {target}" in text
    assert calls == ["catching up", "catching up"]
    assert_moved_and_exact(made, target)


def test_a_loss_too_many_ends_in_one_plain_line_and_a_rerun_resumes():
    made = populate(30)
    _source, target = source_and_target()
    with (
        mock.patch.object(decide, "RESUMES", 2),
        mock.patch.object(Mover, "catch_up", side_effect=GONE),
        pytest.raises(CommandError) as raised,
    ):
        run("--to", target, "--buckets", MOVED)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("movebuckets stopped: (2006, 'Server has gone away').")
    assert "run the same command again to resume" in message
    assert BucketMove.objects.get().phase == "catching up"
    run("--to", target, "--buckets", MOVED)  # resumes
    assert_moved_and_exact(made, target)


def test_an_error_that_is_not_a_lost_connection_is_not_resumed():
    populate(10)
    _source, target = source_and_target()
    broken = ProgrammingError(1146, "Table 'x' doesn't exist")
    with (
        mock.patch.object(Mover, "catch_up", side_effect=broken) as step,
        pytest.raises(CommandError, match=r"^movebuckets stopped: \(1146, \"Table 'x'"),
    ):
        run("--to", target, "--buckets", MOVED)
    assert step.call_count == 1
    call_command("movebuckets", "--abort", stdout=io.StringIO())


def _kill(alias: str, session: int) -> None:
    killer = connections.create_connection(alias)
    try:
        with killer.cursor() as cursor:
            cursor.execute("KILL CONNECTION %s", [session])
    finally:
        killer.close()


@pytest.mark.mariadb_only
def test_killed_sessions_of_the_mover_and_its_lock_are_survived_and_the_lock_is_retaken():
    """Real kills: the mover's connection to ``default`` (where its record is saved), to the
    source, and the session holding its ``GET_LOCK``. The run resumes, holds the lock again
    (a second mover is refused meanwhile) and finishes the move exactly."""
    made = populate(30)
    source, target = source_and_target()
    real = Mover.catch_up
    held_again: list[bool] = []
    locks: list[ServerLock] = []
    real_acquire = ServerLock.acquire

    def acquire(self: ServerLock, *args: Any, **kwargs: Any) -> bool:
        if self.name.endswith(decide.MOVER_LOCK) and not locks:
            locks.append(self)
        return real_acquire(self, *args, **kwargs)

    def catch_up(self: Mover) -> None:
        if not held_again:
            held_again.append(False)
            for alias in ("default", source):
                connections[alias].ensure_connection()
                _kill(alias, connections[alias].connection.thread_id())
            _kill("default", locks[0]._conn.connection.thread_id())
        else:
            other = ServerLock(decide.MOVER_LOCK, "default")
            held_again.append(not other.acquire())
            other.release()
        real(self)

    with (
        mock.patch.object(ServerLock, "acquire", acquire),
        mock.patch.object(Mover, "catch_up", catch_up),
    ):
        text = run("--to", target, "--buckets", MOVED)
    assert "reconnecting and resuming" in text
    assert held_again == [False, True]
    assert f"done: 0-299 now on {target}" in text
    assert_moved_and_exact(made, target)


# --- the driver's own errors and Django's InterfaceError -----------------------------------------


def _driver() -> Any:
    """The DB-API module of the store's databases (``MySQLdb`` or ``sqlite3``)."""
    return connections["default"].Database


def test_a_closed_connection_django_interface_error_is_resumed():
    """Django's ``InterfaceError`` (a closed connection used: ``(0, '')``) is not a
    ``DatabaseError``; it used to escape both the resume and the one-line message."""
    made = populate(30)
    _source, target = source_and_target()
    step, calls = _failing_once("catch_up", InterfaceError(0, ""))
    with mock.patch.object(Mover, "catch_up", step):
        text = run("--to", target, "--buckets", MOVED)
    assert "reconnecting and resuming move #" in text
    assert calls == ["catching up", "catching up"]
    assert_moved_and_exact(made, target)


@pytest.mark.mariadb_only
def test_the_drivers_own_lost_connection_is_resumed():
    """``MySQLdb.OperationalError`` as the driver raises it, not wrapped by Django."""
    made = populate(30)
    _source, target = source_and_target()
    raw = _driver().OperationalError(CR_SERVER_GONE_ERROR, "Server has gone away")
    assert not isinstance(raw, DjangoError)
    step, calls = _failing_once("catch_up", raw)
    with mock.patch.object(Mover, "catch_up", step):
        text = run("--to", target, "--buckets", MOVED)
    assert "reconnecting and resuming move #" in text
    assert calls == ["catching up", "catching up"]
    assert_moved_and_exact(made, target)


@pytest.mark.parametrize("where", ["catch_up", "abort"])
def test_the_drivers_own_fatal_error_ends_in_one_plain_line(where: str):
    """A driver error no one wrapped, in a move or in ``--abort``: one line, no traceback,
    and the move is left to a rerun."""
    populate(10)
    _source, target = source_and_target()
    raw = _driver().ProgrammingError(1146, "Table 'x' doesn't exist")
    assert not isinstance(raw, DjangoError)
    if where == "abort":
        with (
            mock.patch.object(Mover, "catch_up", side_effect=ProgrammingError(1146, "x")),
            pytest.raises(CommandError),
        ):
            run("--to", target, "--buckets", MOVED)  # a move left to abort
        args: tuple[str, ...] = ("--abort",)
    else:
        args = ("--to", target, "--buckets", MOVED)
    with (
        mock.patch.object(Mover, where, side_effect=raw) as step,
        pytest.raises(CommandError) as raised,
    ):
        run(*args)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("movebuckets stopped: (1146, \"Table 'x' doesn't exist\").")
    assert "run the same command again" in message
    assert step.call_count == 1
    call_command("movebuckets", "--abort", stdout=io.StringIO())


def test_interface_errors_past_the_resumes_end_in_one_plain_line():
    populate(10)
    _source, target = source_and_target()
    with (
        mock.patch.object(decide, "RESUMES", 1),
        mock.patch.object(Mover, "catch_up", side_effect=InterfaceError(0, "")),
        pytest.raises(CommandError) as raised,
    ):
        run("--to", target, "--buckets", MOVED)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("movebuckets stopped: (0, '').")
    call_command("movebuckets", "--abort", stdout=io.StringIO())

"""Faults the store must survive, injected in-process for tests and histories.

:func:`lost_commit_answers` makes commits of the store's shard connections *land on the server*
and then fail on the client as if the answer had been lost: ``MySQLdb.OperationalError(2013)``
with the connection closed. That is what a move's fence (its ``KILL``) or a failover does to a
write caught at its commit, and it is the fault that write receipts exist for
(docs/design.md#receipts).

Both commit routes of the write protocol are covered: Django's ``atomic()`` commits through the
driver's ``Connection.commit()``, and the plain ``BEGIN`` ... ``COMMIT`` of
``writes.transaction._DriverTransaction`` through ``Connection.commit()`` or, with the write's
receipt (and the statements that travel with its ``COMMIT``) in the same round trip,
``tables.receipts.commit_batch()``; the injector replaces both while the block runs.
MariaDB only (SQLite never loses an answer).

Usage::

    from schemaless_store.testing.faults import lost_commit_answers

    # The next commit on a shard lands, then its answer is lost:
    with lost_commit_answers() as faults:
        entity.save()
    assert faults.lost == 1

    # The commit does not land (the connection dies first); the client sees the same error:
    with lost_commit_answers(land=False):
        entity.save()

    # Another client writes the same entity between the landed commit and the error:
    def meanwhile():
        Entity.objects.modify(entity.id, bump)  # runs in a thread of its own (own connections)

    with lost_commit_answers(after_commit=meanwhile):
        entity.save()

    # Each shard commit with probability 0.03 (seeded: a failing run replays), any number:
    with lost_commit_answers(None, probability=0.03, seed=1234) as faults:
        run_workload()
    print(faults.seed, faults.lost, faults.commits)

The API (the arguments, and :class:`LostAnswers`' fields) is stable: other test helpers use it.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import MySQLdb
import MySQLdb.connections
from django.db import connections

from ..config import conf
from ..sql.server_errors import CR_SERVER_LOST
from ..tables import receipts as receipt_table
from ..values import bounds


@dataclass
class LostAnswers:
    """What :func:`lost_commit_answers` did so far (read it inside or after the block)."""

    seed: int | None  # the seed of the random choice (probability mode), printed by callers
    commits: int = 0  # shard commits seen
    lost: int = 0  # of those, answers lost (each commit landed first)
    aliases: list[str] = field(default_factory=list)  # the shard of each lost answer, in order
    # What the ``after_commit`` callback raised, if anything (re-raised at the block's end).
    errors: list[BaseException] = field(default_factory=list)


@contextlib.contextmanager
def lost_commit_answers(
    count: int | None = 1,
    *,
    probability: float | None = None,
    seed: int | None = None,
    after_commit: Callable[[], Any] | None = None,
    aliases: Iterable[str] | None = None,
    land: bool = True,
) -> Iterator[LostAnswers]:
    """While the block runs, commits on the store's shard connections land and then fail on
    the client with error 2013, the connection closed.

    ``count``: how many answers to lose at most (None: no limit). ``probability``: lose each
    commit's answer with this probability (default: every one, up to ``count``), drawn from
    ``random.Random(seed)``; a seed is chosen and recorded when none is given. ``after_commit``:
    called after the commit landed and before the error, in a thread of its own (so its store
    calls use connections of their own, as another client's would), and waited for; what it
    raises is re-raised when the block ends. ``aliases``: the shards whose commits count
    (default: every shard of ``SCHEMALESS["SHARDS"]``); commits on other databases pass.
    ``land=False``: the chosen commits do *not* land (the connection dies before the server
    takes the ``COMMIT``: it rolls the transaction back); the client sees the same error.
    """
    if count is not None and not bounds.whole(count, 0):
        raise ValueError(f"count is a whole number of at least 0 or None, not {count!r}")
    if probability is not None and not 0.0 <= probability <= 1.0:
        raise ValueError(f"probability is between 0 and 1, not {probability!r}")
    if probability is not None and seed is None:
        seed = random.SystemRandom().randrange(2**32)
    chooser = random.Random(seed)
    record = LostAnswers(seed=seed)
    watched = list(conf.get().shards if aliases is None else aliases)
    guard = threading.Lock()
    original = MySQLdb.connections.Connection.commit
    original_batch = receipt_table.commit_batch

    def alias_of(connection: Any) -> str | None:
        # connections[...] is per thread: the committing thread's own wrappers.
        for alias in watched:
            if getattr(connections[alias], "connection", None) is connection:
                return alias
        return None

    def commit(connection: MySQLdb.connections.Connection) -> None:
        lose(connection, lambda: original(connection))

    def commit_batch(driver: Any, *args: Any, **kwargs: Any) -> Any:
        return lose(driver, lambda: original_batch(driver, *args, **kwargs))

    def lose(connection: Any, send: Callable[[], Any]) -> Any:
        alias = alias_of(connection)
        if alias is None:
            return send()
        if land:
            answer = send()  # it lands (a failing commit raises here, uncounted)
        if not _chosen(alias):
            return answer if land else send()
        if after_commit is not None:
            _run_as_another_client(after_commit, record)
        # Closed without a COMMIT when not landed: the server rolls the transaction back.
        connection.close()
        raise MySQLdb.OperationalError(CR_SERVER_LOST, "Lost connection to server during query")

    def _chosen(alias: str) -> bool:
        with guard:
            record.commits += 1
            if count is not None and record.lost >= count:
                return False
            if probability is not None and chooser.random() >= probability:
                return False
            record.lost += 1
            record.aliases.append(alias)
            return True

    MySQLdb.connections.Connection.commit = commit
    receipt_table.commit_batch = commit_batch
    try:
        yield record
    finally:
        MySQLdb.connections.Connection.commit = original
        receipt_table.commit_batch = original_batch
    if record.errors:
        raise record.errors[0]


def _run_as_another_client(callback: Callable[[], Any], record: LostAnswers) -> None:
    def run() -> None:
        try:
            callback()
        except BaseException as exc:  # handed to the test at the block's end
            record.errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="another-client", daemon=True)
    thread.start()
    thread.join()

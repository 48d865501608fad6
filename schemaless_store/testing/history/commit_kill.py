"""The ``kill-commit`` fault, inside a history client: a share of the client's commits on the
shards are sent while another connection of the same user ends the committing session with
``KILL CONNECTION`` at once or a random 0-3 ms later, so that the kill meets the ``COMMIT`` (or the
batched query that carries the write's statements, its receipt and its ``COMMIT``,
``tables.receipts.commit_batch``) in flight: the commit may land or not, and its answer is
lost either way (error 2013), or it may come back before the kill. Unlike ``lose-commit``
(:func:`..faults.lost_commit_answers`), which loses the answer only after the commit
completed, the outcome is then unknown to the server's own session too, which is what the
store's recall (``KILL``, then wait until the session is gone, then read the receipt) and the
cache's invalidation after it must get right. Each injection is recorded as a fault with the
operation it hit and what the client saw.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .records import Recorder


class Client(Protocol):
    """What this needs of a client (:class:`.client.Client`)."""

    process: str
    seed: int
    index: int
    recorder: Recorder


MAX_DELAY = 0.003  # seconds between sending the commit and the KILL


class CommitKiller:
    """The killing connections (one per server port, as the client's own user: a user may
    end its own sessions without any privilege) and the seeded choice."""

    def __init__(self, client: Client, share: float) -> None:
        from django.conf import settings

        shard = next(db for alias, db in settings.DATABASES.items() if alias != "default")
        self.user, self.password = shard.get("USER", "root"), shard.get("PASSWORD", "")
        self.client = client
        self.share = share
        self.rng = random.Random(client.seed ^ 0x4B1C)
        self.killers: dict[int, Any] = {}

    def killer(self, port: int) -> Any:
        import MySQLdb

        connection = self.killers.get(port)
        if connection is None:
            connection = MySQLdb.connect(
                host="127.0.0.1",
                port=port,
                user=self.user,
                password=self.password,
                connect_timeout=2,
            )
            connection.autocommit(True)
            self.killers[port] = connection
        return connection

    def commit(self, connection: Any, send: Callable[[], Any]) -> Any:
        if self.rng.random() >= self.share:
            return send()
        # Where the session is, from the driver's own attributes: no statement is sent inside
        # the transaction. (A probe statement here once lost an acknowledged write on Galera:
        # a transaction another node's write had aborted while idle answered the probe with
        # error 1213, which was swallowed, and then its COMMIT with success, committing
        # nothing; docs/reliability.md.)
        port, database = _where(connection)
        if database in (None, "", "meta"):
            return send()
        try:
            session = connection.thread_id()
        except Exception:
            return send()  # the session is closed already: the commit will say so
        # Often at once (the KILL races the commit's packet), else a little after it is sent.
        delay = 0.0 if self.rng.random() < 0.4 else self.rng.uniform(0.0, MAX_DELAY)
        go = threading.Event()
        killed: list[str] = []

        def kill() -> None:
            go.wait(5)
            time.sleep(delay)
            try:
                with self.killer(port).cursor() as cursor:
                    cursor.execute(f"KILL CONNECTION {int(session)}")
                killed.append("killed")
            except Exception as exc:  # the session had ended, or the server is down
                self.killers.pop(port, None)
                killed.append(f"{type(exc).__name__}: {exc}"[:120])

        thread = threading.Thread(target=kill, name="commit-killer", daemon=True)
        thread.start()
        answer = "answered"
        try:
            go.set()
            return send()
        except Exception as exc:
            answer = f"{type(exc).__name__}: {exc}"[:120]
            raise
        finally:
            thread.join(10)
            self.client.recorder.fault(
                "kill-commit",
                process=self.client.process,
                op=self.client.index - 1,
                port=port,
                session=session,
                delay_ms=round(delay * 1000, 3),
                kill=killed[0] if killed else "not sent",
                answer=answer,
            )


def _where(connection: Any) -> tuple[int, str | None]:
    """The server port and database of a driver connection, from its attributes (mysqlclient
    2.2.5 and later keep ``port`` and ``database``), else from the node the Galera backend
    noted on it and the settings of the Django connection that holds it: no statement is
    sent."""
    from ...sql import sessions

    port, database = getattr(connection, "port", None), getattr(connection, "database", None)
    if port is None or database is None:
        from django.db import connections

        for wrapper in connections.all(initialized_only=True):
            if wrapper.connection is connection:
                settings = wrapper.settings_dict
                node = getattr(connection, sessions.NODE, None)
                port = port or (node[1] if node else int(settings["PORT"] or 3306))
                database = database or str(settings["NAME"])
                break
    return int(port or 3306), database


@contextlib.contextmanager
def killed_commits(client: Client, share: float) -> Iterator[None]:
    """While the block runs, that share of the client's shard commits are KILLed in flight."""
    if not share:
        yield
        return
    import MySQLdb.connections

    from ...tables import receipts as receipt_table

    killer = CommitKiller(client, share)
    original = MySQLdb.connections.Connection.commit
    original_batch = receipt_table.commit_batch

    def commit(connection: Any) -> None:
        killer.commit(connection, lambda: original(connection))

    def commit_batch(driver: Any, *args: Any, **kwargs: Any) -> Any:
        return killer.commit(driver, lambda: original_batch(driver, *args, **kwargs))

    MySQLdb.connections.Connection.commit = commit
    receipt_table.commit_batch = commit_batch
    try:
        yield
    finally:
        MySQLdb.connections.Connection.commit = original
        receipt_table.commit_batch = original_batch

"""The nemeses of a history run: each a thread of the runner that injects one kind of fault
into the store from outside, at seeded random moments, records every fault with its time
(:class:`.records.Recorder`), and heals what it broke when the run stops.

- ``kill``: ``KILL CONNECTION`` of a random session of the store's databases on a random
  server, every 0.2-1 s;
- ``move``: a random half of shard_0's or shard_1's buckets moved to shard_2 with
  ``movebuckets`` (in a process of its own), then back; a move that fails is run again, which
  resumes it (docs/resharding.md);
- ``sigkill``: a random plain server SIGKILLed and restarted 1-3 s later, every 8-16 s;
- ``mover-kill`` (with ``move``): every third ``movebuckets`` run is SIGKILLed at a random
  moment 0.2-5 s in (unless it ended first); the next run resumes the move;
- ``lock-wait``: a row lock on a random key's entity (``SELECT ... FOR UPDATE`` on every
  shard database, through one node on Galera) held for longer than the clients'
  ``read_timeout`` (:data:`LOCK_READ_TIMEOUT`, set by the runner), every 1-4 s: a write of that
  entity then waits on the lock until its client gives up on the answer, while the server still
  runs the statements (and the ``COMMIT``) once the lock is gone;
- ``galera-node``: a random node of the Galera shard SIGKILLed and restarted (it rejoins by
  IST), every 10-20 s;
- ``cleaner``: not a fault but a remover racing the writers: ``runcleaner --once`` (every
  index's repair and sweep passes on every shard) in a process of its own, every 0.5-2 s. Its
  sweep deletes an index row whose entity it does not find, after a re-check under that
  entity's row lock: a write that committed such a row without holding the lock would lose it
  (docs/design.md#rows-under-the-lock), which the clients' finds would see.

``lose-commit`` and ``kill-commit`` run inside the clients (:func:`.client.lost_answers`,
:mod:`.commit_kill`).
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from .records import Recorder
from .servers import DATABASE_NAMES, LAYOUT, HistoryStore

NAMES = (
    "kill",
    "lose-commit",
    "kill-commit",
    "move",
    "mover-kill",
    "lock-wait",
    "sigkill",
    "galera-node",
    "cleaner",
)
MOVE_ATTEMPTS = 20  # a move is run again until it finishes, at most this many times
LOCK_READ_TIMEOUT = 3  # the clients' read_timeout with lock-wait on (seconds)
# A mover's output kept in its record (the end of it): its resumes and the phase each resumed
# at, its warnings. 300 characters kept too little to tell which phase a soak's anomaly met.
MOVER_OUTPUT_KEPT = 20_000
LOCKED_KEYS = ("reg", 4), ("claim", 3)  # (prefix, slots) the lock-wait picks from


class Nemesis(threading.Thread):
    """One kind of fault, injected until ``stopping`` is set; :meth:`heal` then undoes it."""

    name = "nemesis"

    def __init__(
        self, store: HistoryStore, recorder: Recorder, seed: int, stopping: threading.Event
    ) -> None:
        super().__init__(name=f"nemesis-{self.name}", daemon=True)
        self.store = store
        self.recorder = recorder
        self.rng = random.Random(seed)
        self.stopping = stopping
        self.injected = 0
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.once()
            except Exception as exc:  # a fault that could not be injected: say so, go on
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])

    def pause(self, low: float, high: float) -> bool:
        """Wait a random while; False once the run is stopping."""
        return not self.stopping.wait(self.rng.uniform(low, high))

    def record(self, **detail: Any) -> None:
        self.injected += 1
        self.recorder.fault(self.name, **detail)

    def once(self) -> None:
        raise NotImplementedError

    def heal(self) -> None:
        """After the thread ended: leave the store whole (every server up, no move half done)."""


class KillSessions(Nemesis):
    name = "kill"

    def once(self) -> None:
        if not self.pause(0.2, 1.0):
            return
        server = self.rng.choice(self.store.every_server())
        if server.process is None or server.process.poll() is not None:
            return  # down at the moment (another nemesis)
        names = ", ".join(f"'{name}'" for name in DATABASE_NAMES)
        try:
            sessions = server.query(
                "SELECT ID, DB, COMMAND, LEFT(INFO, 80) AS INFO "
                f"FROM information_schema.PROCESSLIST WHERE DB IN ({names}) "
                "AND ID <> CONNECTION_ID()"
            )
        except Exception:
            return  # still starting after a restart (another nemesis)
        if not sessions:
            return
        victim = self.rng.choice(sorted(sessions, key=lambda row: row["ID"]))
        try:
            server.query(f"KILL CONNECTION {int(victim['ID'])}")
        except Exception:
            return  # it ended by itself meanwhile
        self.record(
            server=server.name,
            session=victim["ID"],
            db=victim["DB"],
            command=victim["COMMAND"],
            statement=victim["INFO"],
        )


class MoveBuckets(Nemesis):
    name = "move"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unfinished: tuple[str, str] | None = None  # (target, buckets) of a failed move
        self.kill_movers = False  # mover-kill: SIGKILL every third run (set by the runner)
        self.runs = 0

    def run_mover(self, target: str, buckets: str) -> subprocess.CompletedProcess[str]:
        """One ``movebuckets`` run, SIGKILLed at a random moment with mover-kill."""
        kill_at = None
        self.runs += 1
        if self.kill_movers and self.runs % 3 == 1 and not self.stopping.is_set():
            kill_at = self.rng.uniform(0.2, 5.0)
        if kill_at is None:
            return self.store.manage("movebuckets", "--to", target, "--buckets", buckets)
        mover = self.store.spawn(
            "django",
            "movebuckets",
            *("--to", target, "--buckets", buckets),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            out, _ = mover.communicate(timeout=kill_at)
        except subprocess.TimeoutExpired:
            mover.kill()
            out, _ = mover.communicate()
            self.recorder.fault("mover-kill", to=target, buckets=buckets, after=round(kill_at, 2))
        return subprocess.CompletedProcess(mover.args, mover.returncode, out or "", "")

    def once(self) -> None:
        # Short pauses: a 30-minute soak is to complete at least 100 moves (issue 43), and a
        # third of the runs are SIGKILLed and others die with a fault.
        if not self.pause(0.3, 1.0):
            return
        source = self.rng.choice(["shard_0", "shard_1"])
        low, high = (int(n) for n in LAYOUT[source].split("-"))
        half = (high - low + 1) // 2
        first = self.rng.randint(low, high + 1 - half)
        buckets = f"{first}-{first + half - 1}"
        if self.move("shard_2", buckets) and not self.stopping.is_set():
            self.pause(0.2, 0.6)
            self.move(source, buckets)

    def move(self, target: str, buckets: str, attempts: int = MOVE_ATTEMPTS) -> bool:
        """Run the move until it finishes (a rerun resumes it); False if it never did."""
        self.unfinished = (target, buckets)
        for attempt in range(attempts):
            started = time.monotonic()
            self.record(phase="start", to=target, buckets=buckets, attempt=attempt)
            done = self.run_mover(target, buckets)
            output = done.stdout + done.stderr
            # A held move's message names the keys and tables that escaped its fence: whole.
            held = [line for line in output.splitlines() if "escaped the fence" in line]
            self.record(
                phase="end",
                to=target,
                buckets=buckets,
                returncode=done.returncode,
                seconds=round(time.monotonic() - started, 2),
                output=output[-MOVER_OUTPUT_KEPT:],
                **({"held": held[-1][:4000]} if held else {}),
            )
            if done.returncode == 0:
                self.unfinished = None
                return True
            time.sleep(0.5)
        self.errors.append(f"move of {buckets} to {target} failed {attempts} times")
        return False

    def heal(self) -> None:
        if self.unfinished is not None:
            self.move(*self.unfinished)


class KillServer(Nemesis):
    """SIGKILL a server and start it again on the same port and data."""

    name = "sigkill"
    every = (8.0, 16.0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.down: list[Any] = []

    def victims(self) -> list[Any]:
        return list(self.store.servers)

    def once(self) -> None:
        if not self.pause(*self.every):
            return
        server = self.rng.choice(self.victims())
        self.down.append(server)
        server.kill()
        self.record(phase="killed", server=server.name)
        self.stopping.wait(self.rng.uniform(1.0, 3.0))
        self.restart(server)

    def restart(self, server: Any) -> None:
        started = time.monotonic()
        self.bring_back(server)
        self.down.remove(server)
        self.record(
            phase="restarted", server=server.name, seconds=round(time.monotonic() - started, 2)
        )

    def bring_back(self, server: Any) -> None:
        server.start()

    def heal(self) -> None:
        for server in list(self.down):
            self.restart(server)


class KillGaleraNode(KillServer):
    name = "galera-node"
    every = (10.0, 20.0)

    def victims(self) -> list[Any]:
        if self.store.cluster is None:
            raise ValueError("the galera-node nemesis needs --galera")
        return list(self.store.cluster.nodes)

    # A node that fails to rejoin is started again: once, at a soak's end, node1 aborted
    # (signal 6) as it rejoined, and the run ended with no verdict on its history.
    REJOINS = 3

    def bring_back(self, server: Any) -> None:
        from ..mariadb import ServerError

        for attempt in range(1, self.REJOINS + 1):
            try:
                server.restart()  # rejoins, and waits until the cluster is Synced
                return
            except ServerError as exc:
                if attempt == self.REJOINS:
                    raise
                # In the history as a note, not counted as a fault injected.
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self.recorder.fault(
                    self.name, phase="rejoin-failed", server=server.name, error=first[:200]
                )
                time.sleep(2.0)  # also at heal(), when stopping is set already


class LockWait(Nemesis):
    """Hold a row lock on a key's entity for longer than the clients' ``read_timeout``."""

    name = "lock-wait"

    def once(self) -> None:
        from .workload import entity_id

        if not self.pause(1.0, 4.0):
            return
        prefix, slots = self.rng.choice(LOCKED_KEYS)
        key = f"{prefix}-{self.rng.randrange(slots)}"
        hold = self.rng.uniform(LOCK_READ_TIMEOUT + 0.5, LOCK_READ_TIMEOUT + 3.0)
        held = []
        try:
            for server, database in self.homes():
                connection = server.connect(database)
                held.append(connection)
                connection.autocommit(False)
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT id FROM entities WHERE id = %s FOR UPDATE", [entity_id(key).bytes]
                    )
        except Exception:
            self.release(held)  # a server down or starting (another nemesis): not now
            return
        waiting, until = 0, time.monotonic() + hold
        while not self.stopping.wait(min(0.5, max(0.0, until - time.monotonic()))):
            try:
                waiting = max(waiting, self.waiting(held))
            except Exception:
                break  # a server went down meanwhile: the lock was held until then
            if time.monotonic() >= until:
                break
        self.release(held)
        self.record(key=key, seconds=round(hold, 2), waiting=waiting)

    @staticmethod
    def release(held: list[Any]) -> None:
        for connection in held:
            try:
                connection.rollback()
                connection.close()
            except Exception:
                pass  # the server went down meanwhile (another nemesis)

    @staticmethod
    def waiting(held: list[Any]) -> int:
        """Transactions waiting now for a lock these connections hold."""
        waiting = 0
        for connection in held:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS AS w "
                    "JOIN information_schema.INNODB_TRX AS t ON t.trx_id = w.blocking_trx_id "
                    "WHERE t.trx_mysql_thread_id = CONNECTION_ID()"
                )
                waiting += int(cursor.fetchone()[0])
        return waiting

    def homes(self) -> list[tuple[Any, str]]:
        """(server, database) of every shard database, the Galera shard through one node."""
        first, *rest = self.store.servers
        homes: list[tuple[Any, str]] = [(first, "shard0")]
        if self.store.cluster is not None:
            homes += [(self.rng.choice(self.store.cluster.nodes), "shard1"), (rest[0], "shard2")]
        else:
            homes += [(rest[0], "shard1"), (rest[1], "shard2")]
        return [
            (server, db) for server, db in homes if server.process and server.process.poll() is None
        ]


class RunCleaner(Nemesis):
    name = "cleaner"

    def once(self) -> None:
        if not self.pause(0.5, 2.0):
            return
        started = time.monotonic()
        # A pass that a fault cut short (or a run stuck past the timeout) fails the run: it
        # is recorded, not an injection error; the next run does the work again.
        try:
            done = self.store.manage("runcleaner", "--once", "--nice", "0", timeout=300)
            returncode, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            returncode, output = -1, f"timed out: {exc}"
        self.record(
            returncode=returncode,
            seconds=round(time.monotonic() - started, 2),
            **({"output": output[-2000:]} if returncode else {}),
        )


KINDS: dict[str, Callable[..., Nemesis]] = {
    "kill": KillSessions,
    "lock-wait": LockWait,
    "move": MoveBuckets,
    "sigkill": KillServer,
    "galera-node": KillGaleraNode,
    "cleaner": RunCleaner,
}

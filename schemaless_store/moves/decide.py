"""What ``movebuckets`` decides around the move itself (docs/resharding.md): one mover at a
time; for the buckets asked, whether to resume the move in progress, say there is nothing to
do, show the plan (a dry run) or start a new move; and, while it runs, to reconnect and resume
after a lost connection (:func:`run_resuming`). The command only parses its options and prints;
this module holds the logic, as :class:`~schemaless_store.cleaner.Cleaner` does for
``runcleaner``."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, InterfaceError, connections
from django.db import Error as DjangoError

from ..config.metadata import BucketMove
from ..exceptions import MoveRefused
from ..guards import fence
from ..guards.server_lock import ServerLock
from ..query.pool import reset_scatter_pool
from ..sql.server_errors import CONNECTION_LOST, broken_trigger, code_of
from ..topology import shards
from . import plan

logger = logging.getLogger("schemaless_store.moves")

# A run reconnects and resumes after this many lost connections at most (a move's phases and
# checkpoints are recorded, so each resume goes on where the record says)...
RESUMES = 5
# ... each time waiting up to this long for every server of the move to answer again (seconds):
# a restarted server is back within seconds, a failed-over Galera node at once.
RECONNECT_WAIT = 60.0

# The mover's lock, a ServerLock under a name no index can have (index names have no hyphen).
MOVER_LOCK = "bucket-moves"


@contextlib.contextmanager
def one_mover() -> Iterator[ServerLock]:
    """One ``movebuckets`` (or ``--abort``) at a time in the whole store: a lock on ``default``
    (where the moves are recorded) that dies with its process (``GET_LOCK`` on MariaDB, ``flock``
    on SQLite: :class:`~schemaless_store.guards.server_lock.ServerLock`), so a second mover
    started on the same move is refused instead of running it twice, and a SIGKILLed one leaves
    no lock behind."""
    lock = ServerLock(MOVER_LOCK, DEFAULT_DB_ALIAS)
    if not lock.acquire():
        raise MoveRefused(
            f"another movebuckets is running (it holds {lock.describe()}): wait for it to "
            "finish, or stop it and run this again; nothing was changed"
        )
    try:
        yield lock
    finally:
        lock.release()


def database_errors() -> tuple[type[Exception], ...]:
    """Every database error a move's statements can raise: Django's (``django.db.Error``:
    ``DatabaseError``, and ``InterfaceError``, which is not one), and each configured driver's
    own (its PEP 249 ``Error``: ``MySQLdb.Error``, ``sqlite3.Error``), which reaches the
    mover unwrapped wherever a statement runs outside Django's wrapper."""
    return (DjangoError, *dict.fromkeys(driver.Error for driver in _drivers()))


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a lost or refused connection (to a
    shard or to ``default``), as Django raises it or as the driver does."""
    if shards.unreachable(exc) is not None:
        return True
    drivers = _drivers()
    closed = (InterfaceError, *(driver.InterfaceError for driver in drivers))
    lost = tuple(driver.Error for driver in drivers)
    found: BaseException | None = exc
    for _depth in range(5):
        if found is None:
            return False
        if isinstance(found, closed):  # a closed connection used: (0, '')
            return True
        if isinstance(found, lost) and code_of(found) in CONNECTION_LOST:
            return True
        found = found.__cause__
    return False


def _drivers() -> list[Any]:
    """The DB-API modules of the configured databases (``MySQLdb``, ``sqlite3``)."""
    modules = (getattr(connections[alias], "Database") for alias in connections)  # noqa: B009
    return list({id(module): module for module in modules}.values())


def run_resuming(
    move: BucketMove,
    run: Callable[[BucketMove], BucketMove],
    *,
    lock: ServerLock | None = None,
    say: Callable[[str], None] = lambda _line: None,
    resumes: int | None = None,
    wait: float | None = None,
) -> BucketMove:
    """``run(move)``; after a lost connection (a server restarted, a connection killed) or a
    table whose triggers failed to load (a new mover reopens it as it starts), drop every
    connection, wait until the move's servers answer, take the mover's lock again (its
    ``GET_LOCK`` went with a killed session) and run the move again from its record, up to
    ``resumes`` times (:data:`RESUMES`). Any other error, or one loss too many, is raised."""
    resumes = RESUMES if resumes is None else resumes
    wait = RECONNECT_WAIT if wait is None else wait
    caught: tuple[type[BaseException], ...] = (*database_errors(), OSError)
    for attempt in range(resumes + 1):
        try:
            return run(move)
        except caught as exc:
            # A table whose cached triggers a KILL cut short (tables/trigger_reload.py) fails
            # every write to it, the mover's too: a mover run again reopens it first.
            broken = broken_trigger(exc)
            if not (connection_lost(exc) or broken) or attempt == resumes:
                raise
            what = "A table's triggers failed to load" if broken else "Connection lost"
            say(
                f"{what} ({exc}); reconnecting and resuming move #{move.pk} "
                f"(resume {attempt + 1} of {resumes})."
            )
            logger.warning("move #%s: %s (%s); resuming", move.pk, what.lower(), exc)
        _drop_connections()
        _await_servers([DEFAULT_DB_ALIAS, move.target, *move.sources], wait)
        if lock is not None and not _retake(lock, wait):
            raise MoveRefused(
                f"move #{move.pk}: the mover's lock was lost with its connection and another "
                f"movebuckets holds it now ({lock.describe()}); let that one finish the move"
            )
        move = BucketMove.objects.get(pk=move.pk)
    raise AssertionError("unreachable")


def _drop_connections() -> None:
    for conn in connections.all(initialized_only=True):
        with contextlib.suppress(Exception):
            conn.close()
    shards.close_index_connections()
    reset_scatter_pool()


def _await_servers(aliases: Sequence[str], wait: float) -> None:
    deadline = time.monotonic() + wait
    for alias in dict.fromkeys(aliases):
        while True:
            try:
                connections[alias].ensure_connection()
                break
            except database_errors():
                with contextlib.suppress(Exception):
                    connections[alias].close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)


def _retake(lock: ServerLock, wait: float) -> bool:
    """The lock again: its connection may be gone (and the lock with it) or still ours."""
    with contextlib.suppress(Exception):
        lock.release()
    return lock.acquire(wait=min(wait, 5.0))


def shown(spans: Sequence[Sequence[int]]) -> str:
    """Bucket ranges as an operator writes them: ``0-99, 200``."""
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@dataclass
class Decision:
    """What to do for a ``movebuckets --to T --buckets B``: exactly one of the fields is set."""

    resume: BucketMove | None = None  # the move in progress, of these buckets to this target
    done_already: bool = False  # the same move finished before (a mover killed as it printed)
    counted: plan.Plan | None = None  # a dry run: the plan with its row counts
    started: tuple[BucketMove, plan.Plan] | None = None  # a new move, recorded, and its plan


def decide(target: str, numbers: list[int], *, dry_run: bool) -> Decision:
    """Resume, nothing to do, a dry run's counts, or a new move (recorded, not yet run).
    :class:`MoveRefused` for another move in progress, or input :func:`.plan.plan` refuses."""
    current = plan.unfinished()
    if current is not None:
        if current.phase == "held":
            raise MoveRefused(
                f"move #{current.pk} of buckets {shown(current.buckets)} to {current.target} "
                f"is held: writes escaped its fence ({current.message}); deal with them, then "
                f"run movebuckets --release {current.pk}"
            )
        if current.target != target or plan.from_ranges(current.buckets) != numbers:
            raise MoveRefused(
                f"move #{current.pk} of buckets {shown(current.buckets)} to "
                f"{current.target} is {current.phase}: finish it (run its command again) "
                "or abort it (--abort) first"
            )
        return Decision(resume=current)
    last = plan.last_done()
    if (
        last is not None
        and last.target == target
        and plan.from_ranges(last.buckets) == numbers
        and all(owner == target for owner in plan.owners_of(numbers))
    ):
        # Other buckets the target owns already are refused by plan.plan.
        return Decision(done_already=True)
    found = plan.plan(target, numbers)
    if dry_run:
        return Decision(counted=plan.count_rows(found))
    for source in found.sources:
        if shards.dialect(source).fence_by_kill:
            problem = fence.unready(source)
            if problem is not None:
                raise MoveRefused(f"the move cannot fence {source}, nothing was changed: {problem}")
    return Decision(started=(plan.start(found), found))

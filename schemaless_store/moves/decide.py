"""What ``movebuckets`` decides before it moves anything (docs/resharding.md): one mover at a
time, and, for the buckets asked, whether to resume the move in progress, say there is nothing
to do, show the plan (a dry run) or start a new move. The command only parses its options and
prints; this module holds the logic, as :class:`~schemaless_store.cleaner.Cleaner` does for
``runcleaner``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS

from ..exceptions import MoveRefused
from ..metadata import BucketMove
from ..topology import fence, shards
from ..topology.server_lock import ServerLock
from . import plan

# The mover's lock, a ServerLock under a name no index can have (index names have no hyphen).
MOVER_LOCK = "bucket-moves"


@contextlib.contextmanager
def one_mover() -> Iterator[None]:
    """One ``movebuckets`` (or ``--abort``) at a time in the whole store: a lock on ``default``
    (where the moves are recorded) that dies with its process (``GET_LOCK`` on MySQL, ``flock``
    on SQLite: :class:`~schemaless_store.topology.server_lock.ServerLock`), so a second mover
    started on the same move is refused instead of running it twice, and a SIGKILLed one leaves
    no lock behind."""
    lock = ServerLock(MOVER_LOCK, DEFAULT_DB_ALIAS)
    if not lock.acquire():
        raise MoveRefused(
            f"another movebuckets is running (it holds {lock.describe()}): wait for it to "
            "finish, or stop it and run this again; nothing was changed"
        )
    try:
        yield
    finally:
        lock.release()


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
        if shards.vendor(source) == "mysql":
            problem = fence.unready(source)
            if problem is not None:
                raise MoveRefused(f"the move cannot fence {source}, nothing was changed: {problem}")
    return Decision(started=(plan.start(found), found))

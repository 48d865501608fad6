"""One client process of a history run (``python -m schemaless_store.testing.history.client``,
started by the runner with the store's settings, :mod:`.settings`, as the application user): a
seeded random sequence of operations (:mod:`.workload`) on a few keys until a deadline, each
recorded (:mod:`.records`) as invoked, then as completed ``ok``, ``fail`` (definitely not
applied) or ``info`` (may have been applied). An operation on several keys (``bulk_put``, a
``map_entities`` run) is recorded as one operation per key, invoked and completed together.

Faults inside the client: ``lose-commit`` (:func:`lost_answers`) and ``kill-commit``
(:mod:`.commit_kill`).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .workload import Operations, entity_id

__all__ = ["Client", "classify", "entity_id"]


def classify(exc: BaseException) -> str:
    """``fail`` for the answers that say nothing was written, ``info`` for anything else: an
    exception that may come after a commit landed (a lost connection, an unknown outcome)."""
    from django.core.exceptions import ObjectDoesNotExist

    from ... import exceptions
    from ...exceptions import Conflict, EntityExists, ShardUnavailable, UniqueViolation

    # The receipts' "outcome unknown" (issue 34), named so even if it stops being lost=True.
    outcome_unknown = getattr(exceptions, "OutcomeUnknown", None)
    if outcome_unknown is not None and isinstance(exc, outcome_unknown):
        return "info"
    if isinstance(exc, ShardUnavailable):
        return "info" if exc.lost else "fail"
    if isinstance(exc, Conflict | EntityExists | ObjectDoesNotExist | UniqueViolation):
        return "fail"
    return "info"


class Client(Operations):
    def __init__(self, process: str, seed: int, epoch: float, out: Path) -> None:
        from .records import Recorder

        self.process = process
        self.seed = seed
        self.rng = random.Random(seed)
        self.epoch = epoch
        self.recorder = Recorder(out)
        self.index = 0
        # The value this client last wrote to each register key (acknowledged): what a find
        # looks up. Written over by others or not, the checker decides what the answer proves.
        self.mine: dict[str, str] = {}
        self.last_result: Any = None  # what the last operation that succeeded returned

    def run(self, f: str, key: str, value: Any) -> str:
        """Run one operation, recorded; its outcome."""
        from django.db import connections

        index, self.index = self.index, self.index + 1
        self.last_result = None
        self.recorder.invoke(self.process, index, f, key, value)
        try:
            details = getattr(self, f"do_{f}")(key, value)
        except Exception as exc:
            outcome = "fail" if f in ("read", "find", "history") else classify(exc)
            error = f"{type(exc).__name__}: {exc}"[:300]
            self.recorder.complete(self.process, index, outcome, error=error)
        else:
            outcome = "ok"
            self.recorder.complete(self.process, index, outcome, **details)
            self.last_result = details.get("result")
        finally:
            # What a request's end does in a Django app: a connection a fault broke is not
            # used again. (The store swallows a failed read of the shard map and keeps its
            # copy; without this, a process would keep a broken metadata connection, and so
            # that copy, for ever.)
            for connection in connections.all():
                connection.close_if_unusable_or_obsolete()
        return outcome

    def run_group(
        self,
        f: str,
        items: list[tuple[str, Any]],
        action: Callable[[], dict[str, tuple[str, dict[str, Any]]]],
    ) -> str:
        """One call that writes several keys (``items``: key, value), recorded as one
        operation per key; ``action`` returns each key's outcome and details. The first
        key's outcome."""
        from django.db import connections

        indexes = []
        for key, value in items:
            indexes.append(self.index)
            self.recorder.invoke(self.process, self.index, f, key, value)
            self.index += 1
        try:
            outcomes = action()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
            outcomes = {key: (classify(exc), {"error": error}) for key, _ in items}
        finally:
            for connection in connections.all():
                connection.close_if_unusable_or_obsolete()
        for index, (key, _value) in zip(indexes, items, strict=True):
            outcome, details = outcomes[key]
            self.recorder.complete(self.process, index, outcome, **details)
        return outcomes[items[0][0]][0]


@contextlib.contextmanager
def lost_answers(client: Client, share: float) -> Iterator[None]:
    """The ``lose-commit`` nemesis, inside the client: that share of its shard commits land,
    then their answers are lost (:func:`schemaless_store.testing.faults.lost_commit_answers`,
    seeded by the client's seed); each is recorded as a fault, with the operation it hit."""
    if not share:
        yield
        return
    from ..faults import lost_commit_answers

    def record() -> None:
        client.recorder.fault("lose-commit", process=client.process, op=client.index - 1)

    with lost_commit_answers(None, probability=share, seed=client.seed, after_commit=record):
        yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--process", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--epoch", type=float, required=True, help="The run's start (monotonic).")
    parser.add_argument("--until", type=float, required=True, help="Its end (monotonic).")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--lose-commit", type=float, default=0.0, help="Share of commits.")
    parser.add_argument("--kill-commit", type=float, default=0.0, help="Share of commits.")
    args = parser.parse_args(argv)
    import django

    django.setup()
    from .commit_kill import killed_commits

    client = Client(args.process, args.seed, args.epoch, args.out)
    with lost_answers(client, args.lose_commit), killed_commits(client, args.kill_commit):
        while time.monotonic() < args.until:
            client.step()
    client.recorder.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

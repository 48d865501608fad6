"""One client process of a history run (``python -m schemaless_store.testing.history.client``,
started by the runner with the store's settings, :mod:`.settings`): a seeded random sequence of
operations on a few keys until a deadline, each recorded (:mod:`.records`) as invoked, then as
completed ``ok``, ``fail`` (definitely not applied) or ``info`` (may have been applied).

- List keys (``list-<generation>-<slot>``; a new generation every :data:`GENERATION` seconds,
  so that no list grows without bound): ``append`` adds a unique element through
  ``Entity.objects.modify`` (the first append creates the entity); ``read`` records the list.
- Register keys (``reg-<slot>``): ``save`` (a plain save of a unique value, no read first),
  ``create``, ``write`` (a ``modify`` that sets a unique value), ``delete`` (a ``modify`` that
  deletes), each ``modify`` recording the value it replaced (``prev``); ``read``; ``find``,
  the value this client last wrote to the key looked up through the index on ``value``
  (:mod:`.indexes`), recording the keys whose entities the query returned.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LIST_SLOTS = 4
REGISTER_SLOTS = 4
GENERATION = 30.0  # seconds a generation of list keys takes appends
KEYS = uuid.UUID("5c4e0a1e-55a7-4b1c-9a3e-34c0ffee0034")  # the namespace of the keys' ids


def entity_id(key: str) -> uuid.UUID:
    """A key's entity id: fixed, and spread over the buckets like any id."""
    return uuid.uuid5(KEYS, key)


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


class Client:
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

    def list_key(self) -> str:
        generation = int((time.monotonic() - self.epoch) / GENERATION)
        return f"list-{generation}-{self.rng.randrange(LIST_SLOTS)}"

    def step(self) -> None:
        rng = self.rng
        if rng.random() < 0.5:
            f = "append" if rng.random() < 0.75 else "read"
            key = self.list_key()
        else:
            f = rng.choices(
                ("save", "create", "write", "delete", "read", "find"), (25, 15, 20, 15, 15, 15)
            )[0]
            key = f"reg-{rng.randrange(REGISTER_SLOTS)}"
            if f == "find":
                if not self.mine:
                    f = "read"
                else:
                    key = rng.choice(sorted(self.mine))
                    self.run(f, key, self.mine[key])
                    return
        value = f"{self.process}-{self.index}" if f not in ("read", "delete") else None
        if self.run(f, key, value) == "ok" and key.startswith("reg-"):
            if value is not None:
                self.mine[key] = value
            elif f == "delete":
                self.mine.pop(key, None)

    def run(self, f: str, key: str, value: Any) -> str:
        """Run one operation, recorded; its outcome."""
        from django.db import connections

        index, self.index = self.index, self.index + 1
        self.last_result = None
        self.recorder.invoke(self.process, index, f, key, value)
        try:
            details = getattr(self, f"do_{f}")(key, value)
        except Exception as exc:
            outcome = "fail" if f in ("read", "find") else classify(exc)
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

    # --- the operations: each returns what its completion records ------------------------

    def do_read(self, key: str, value: Any) -> dict[str, Any]:
        from ...models import Entity

        try:
            entity = Entity.objects.get(id=entity_id(key))
        except Entity.DoesNotExist:
            return {"result": [] if key.startswith("list-") else None}
        if key.startswith("list-"):
            return {"result": list(entity.get("items", []))}
        return {"result": entity.get("value")}

    def do_find(self, key: str, value: Any) -> dict[str, Any]:
        """The keys of the entities ``filter_index(value=...)`` returns (an id that is no
        register's, by its hex)."""
        from ...models import Entity

        names = {entity_id(f"reg-{slot}"): f"reg-{slot}" for slot in range(REGISTER_SLOTS)}
        found = Entity.objects.filter_index(value=value)
        return {"result": sorted(names.get(entity.id, entity.id.hex) for entity in found)}

    def do_append(self, key: str, value: Any) -> dict[str, Any]:
        from ...exceptions import EntityExists
        from ...models import Entity

        def append(entity: Any) -> None:
            entity["items"] = [*entity.get("items", []), value]

        for _attempt in range(3):
            try:
                Entity.objects.modify(entity_id(key), append)
                return {}
            except Entity.DoesNotExist:
                try:
                    Entity.objects.create(id=entity_id(key), items=[value])
                    return {}
                except EntityExists:
                    continue  # another client's first append: append to it
        raise EntityExists(f"{key}: created and gone again three times")

    def do_save(self, key: str, value: Any) -> dict[str, Any]:
        from ...models import Entity

        Entity.from_properties({"id": entity_id(key), "value": value}).save()
        return {}

    def do_create(self, key: str, value: Any) -> dict[str, Any]:
        from ...models import Entity

        Entity.objects.create(id=entity_id(key), value=value)
        return {}

    def do_write(self, key: str, value: Any) -> dict[str, Any]:
        return self.modify(key, value)

    def do_delete(self, key: str, value: Any) -> dict[str, Any]:
        from ... import DELETE

        return self.modify(key, DELETE)

    def modify(self, key: str, value: Any) -> dict[str, Any]:
        from ... import DELETE
        from ...models import Entity

        seen: list[Any] = []

        def change(entity: Any) -> Any:
            seen.append(entity.get("value"))
            if value is DELETE:
                return DELETE
            entity["value"] = value
            return None

        Entity.objects.modify(entity_id(key), change)
        return {"prev": seen[-1]}


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
    args = parser.parse_args(argv)
    import django

    django.setup()
    client = Client(args.process, args.seed, args.epoch, args.out)
    with lost_answers(client, args.lose_commit):
        while time.monotonic() < args.until:
            client.step()
    client.recorder.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

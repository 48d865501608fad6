"""``python -m tests.support.galera_rivals IDS SECONDS TAG``: appends unique values to the
entities ``IDS`` (comma-separated hex) through ``Entity.objects.modify`` for ``SECONDS``, and
prints, as JSON, the values each entity was acknowledged to hold (tests/replicas/test_galera.py
runs two through different nodes of a cluster: a save on the driver's route sends its
``UPDATE`` with the receipt and the ``COMMIT`` in one query, and the later of two conflicting
commits fails certification there). Exits 1 after any error."""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

from tests.support import child


def _created(ids: str, **properties: Any) -> list[uuid.UUID]:
    """The entities ``ids`` (comma-separated hex), made with ``properties`` unless they exist:
    both rivals try, one creates each."""
    from schemaless_store.exceptions import EntityExists
    from schemaless_store.models import Entity

    keys = [uuid.UUID(i) for i in ids.split(",")]
    for key in keys:
        with contextlib.suppress(EntityExists):
            Entity.objects.create(id=key, **properties)
    return keys


def _turns(keys: list[uuid.UUID], seconds: float, tag: str) -> Iterator[tuple[uuid.UUID, str, int]]:
    """For ``seconds``: a seeded choice of key, a value of its own (``tag-N``), and N from 1."""
    rng = random.Random(tag)
    deadline = time.monotonic() + seconds
    made = 0
    while time.monotonic() < deadline:
        made += 1
        yield rng.choice(keys), f"{tag}-{made - 1}", made


def _rival_appends(ids: str, seconds: float, tag: str) -> None:
    from schemaless_store.models import Entity

    keys = _created(ids, items=[])
    acknowledged: dict[str, list[str]] = {key.hex: [] for key in keys}
    for key, value, _made in _turns(keys, seconds, tag):

        def append(entity: Any, value: str = value) -> None:
            entity["items"] = [*entity.get("items", []), value]

        Entity.objects.modify(key, append)
        acknowledged[key.hex].append(value)
    print(json.dumps(acknowledged), flush=True)


def _rival_registers(ids: str, seconds: float, tag: str) -> None:
    """The history soak's lost register write (docs/reliability.md, Galera seed 4912): one
    rival sets ``value`` by a partial update (``filter(id=...).update``), the other by
    ``modify`` (a locked read, then the save), each value unique. Prints, as JSON, each
    entity's acknowledged values, and for a ``modify`` the value it read before its own
    (``[value, prev]``). A write refused after its retries (certification failed on each, or
    ``modify`` met another's commit on each attempt) is not acknowledged."""
    from django.db import OperationalError

    from schemaless_store.exceptions import Conflict
    from schemaless_store.models import Entity

    keys = _created(ids, value="first")
    acknowledged: dict[str, list[Any]] = {key.hex: [] for key in keys}
    for key, value, made in _turns(keys, seconds, tag):
        seen: list[Any] = [None]

        def change(entity: Any, value: str = value, seen: list[Any] = seen) -> None:
            seen.append(entity.get("value"))
            entity["value"] = value

        try:
            if made % 2:
                assert Entity.objects.filter(id=key).update(value=value) == 1
            else:
                Entity.objects.modify(key, change)
        except Conflict:  # modify's attempts all met another's commit: not applied
            continue
        except OperationalError as exc:  # certification failed on every retry: not applied
            if exc.args[0] != 1213:
                raise
            continue
        acknowledged[key.hex].append([value, seen[-1]])
    print(json.dumps(acknowledged), flush=True)


def _histories(ids: str) -> None:
    """Print each entity's kept versions' ``value``, oldest first, as JSON."""
    from schemaless_store.cells.store import entity_history

    print(
        json.dumps(
            {
                key: [(v.properties or {}).get("value") for v in entity_history(uuid.UUID(key))]
                for key in ids.split(",")
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    child._setup()
    if sys.argv[1] == "registers":
        _rival_registers(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "histories":
        _histories(sys.argv[2])
    else:
        _rival_appends(sys.argv[1], float(sys.argv[2]), sys.argv[3])
    os._exit(0)

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
from typing import Any

from tests.support import child


def _rival_appends(ids: str, seconds: float, tag: str) -> None:
    from schemaless_store.exceptions import EntityExists
    from schemaless_store.models import Entity

    keys = [uuid.UUID(i) for i in ids.split(",")]
    for key in keys:  # both rivals try; one creates each
        with contextlib.suppress(EntityExists):
            Entity.objects.create(id=key, items=[])
    rng = random.Random(tag)
    acknowledged: dict[str, list[str]] = {key.hex: [] for key in keys}
    deadline = time.monotonic() + seconds
    made = 0
    while time.monotonic() < deadline:
        key, value = rng.choice(keys), f"{tag}-{made}"
        made += 1

        def append(entity: Any, value: str = value) -> None:
            entity["items"] = [*entity.get("items", []), value]

        Entity.objects.modify(key, append)
        acknowledged[key.hex].append(value)
    print(json.dumps(acknowledged), flush=True)


if __name__ == "__main__":
    child._setup()
    _rival_appends(sys.argv[1], float(sys.argv[2]), sys.argv[3])
    os._exit(0)

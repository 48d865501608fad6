"""Read-modify-write without losing a write: ``Entity.objects.modify(id, fn)``.

Each attempt reads the entity from its primary (never the entity cache or a replica, which may
lag and would only cost a conflict), calls ``fn(entity)``, which changes it in place, and saves
it with ``if_unchanged=True`` (:mod:`..values.expected`). A :class:`Conflict` (another writer got in
between) means: read again, call ``fn`` again. ``fn`` may return :data:`schemaless_store.DELETE`
to delete the entity instead, under the same check.

``fn`` runs again only after a :class:`Conflict`, which a write that landed never raises: when
the answer to a save's commit is lost, its receipt on the shard says whether it landed
(docs/design.md#receipts), and a landed save returns. If the shard cannot be asked,
:class:`~..exceptions.OutcomeUnknown` reaches the caller and ``fn`` is not called again.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from .. import DELETE
from ..exceptions import Conflict
from ..query.fetch import fetch_by_ids
from ..topology import replicas
from ..values import bounds, entity_ids

# The longest pause between two attempts; the pauses grow from 1 ms with jitter, so writers
# that collided do not collide again in lockstep.
MAX_PAUSE = 0.05


def read_primary(model: Any, key: bytes) -> Any:
    """The entity as its primary stores it now, or ``model.DoesNotExist``."""
    with replicas.from_primary():
        found = fetch_by_ids(model, [key]).get(key)
    if found is None:
        raise model.DoesNotExist(f"no entity with id {uuid.UUID(bytes=key)}")
    return found


def modify(model: Any, entity_id: Any, fn: Callable[[Any], Any], attempts: int = 10) -> Any:
    """Apply ``fn`` to the entity and save it if nothing changed it meanwhile, retrying up to
    ``attempts`` times. Returns the saved entity (or the deleted one, if ``fn`` returned
    :data:`~schemaless_store.DELETE`); :class:`Conflict` once the attempts run out;
    ``model.DoesNotExist`` if there is no such entity (or it was deleted meanwhile)."""
    if not bounds.whole(attempts):
        raise ValueError(f"attempts must be a whole number of at least 1, not {attempts!r}")
    key = entity_ids.entity_id_bytes(entity_id)
    for attempt in range(attempts):
        entity = read_primary(model, key)
        result = fn(entity)
        try:
            if result is DELETE:
                entity.delete(if_unchanged=True)
            else:
                entity.save(if_unchanged=True)
            return entity
        except Conflict:
            if attempt == attempts - 1:
                break
        time.sleep(random.uniform(0, min(MAX_PAUSE, 0.001 * 2**attempt)))
    raise Conflict(
        [uuid.UUID(bytes=key)],
        f"entity {uuid.UUID(bytes=key)} changed under each of {attempts} attempts to modify it",
    )

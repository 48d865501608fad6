"""Functions the mapentities tests apply (imported by dotted path, in this process or a child's)."""

from __future__ import annotations

from typing import Any

from schemaless_store import DELETE
from schemaless_store.topology import bucket_map

# What the functions were called with, in this process: {function name: [entity ids]}.
CALLS: dict[str, list[Any]] = {}
# explode() raises on entities with ``bad`` while this is True.
BROKEN = {"on": True}
# move_midway() publishes a new map version on this call.
MOVE_AT = {"call": 5}


def _called(name: str, entity: Any) -> None:
    CALLS.setdefault(name, []).append(entity.id)


def rename_link(entity: Any) -> None:
    """``link`` becomes ``url``; every entity gets ``mapped``."""
    _called("rename_link", entity)
    if "link" in entity:
        entity["url"] = entity["link"]
        del entity["link"]
    entity["mapped"] = True


def add_one(entity: Any) -> None:
    """Not idempotent: applied twice to an entity, its ``mapped`` says 2."""
    _called("add_one", entity)
    entity["mapped"] = entity.get("mapped", 0) + 1


def explode(entity: Any) -> None:
    _called("explode", entity)
    if entity.get("bad") and BROKEN["on"]:
        raise ValueError(f"cannot map {entity['n']}")
    entity["mapped"] = 1


def drop_junk(entity: Any) -> Any:
    _called("drop_junk", entity)
    if entity.get("junk"):
        return DELETE
    return None


def noop(entity: Any) -> None:
    _called("noop", entity)


def move_midway(entity: Any) -> None:
    """add_one, and a new map version (as a bucket move's flip publishes) on one call."""
    add_one(entity)
    if len(CALLS["add_one"]) == MOVE_AT["call"]:
        found = bucket_map.stored()
        bucket_map.publish(found.owners, note="a move, as far as the run can tell")


# pause_midway() waits on this call until the test lets it go (a move runs meanwhile).
PAUSE: dict[str, Any] = {}


def pause_midway(entity: Any) -> None:
    add_one(entity)
    if len(CALLS["add_one"]) == PAUSE["at"]:
        PAUSE["reached"].set()
        PAUSE["gate"].wait(120)

"""What a history client does (:class:`Operations`, mixed into :class:`.client.Client`): each
``do_<f>`` runs one operation and returns what its completion records; :meth:`step` draws the
next one. Every value written is unique (``"<process>-<index>"``).

- List keys (``list-<generation>-<slot>``; a new generation every :data:`GENERATION` seconds,
  so that no list grows without bound): ``append`` adds an element through
  ``Entity.objects.modify`` (the first append creates the entity); ``map`` (process ``p0``
  only, every :data:`MAP_EVERY` seconds) appends an element to each list of the generation with
  ``map_entities``, resumed until it finishes; ``read`` records the list.
- Register keys (``reg-<slot>``): ``save`` (a plain save, no read first), ``create``,
  ``write`` (a ``modify`` that sets the value), ``delete`` (a ``modify`` that deletes), each
  ``modify`` recording the value it replaced (``prev``); ``update`` (the partial update,
  ``filter(id=...).update(value=...)``; no entity: a definite failure); ``bulk`` (one
  ``bulk_put`` of two registers, a record per key; a failure is ``info`` for both, as each
  shard's part is a transaction of its own, ``settled`` when no answer was lost); ``read``
  (through the entity cache and the near cache); ``find`` (the value this client last wrote,
  looked up through the index on ``value``); ``history`` (the values of the entity's kept
  versions, oldest first).
- Claim keys (``claim-<slot>``): ``claim`` saves a unique value and one of a few tokens under
  a unique index (the token is the value's suffix, ``@t<n>``; ``UniqueViolation``: a definite
  failure); ``delete``; ``read``.
- Cell keys (``cell-<generation>-<slot>``): ``cellput`` appends a version to a cell column;
  ``read`` records the versions' values, oldest first: a list, checked as list keys are.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from . import variant

LIST_SLOTS = 4
REGISTER_SLOTS = 4
CLAIM_SLOTS = 3
TOKENS = 4
CELL_SLOTS = 2
GENERATION = 30.0  # seconds a generation of list and cell keys takes writes
CELL_COLUMN = "history_cell"
MAP_EVERY = 8.0  # seconds between two map runs of p0
# A map run stopped (by a move, which it waits out, or a fault) is resumed for this long.
MAP_RESUME_FOR = 20.0
KEYS = uuid.UUID("5c4e0a1e-55a7-4b1c-9a3e-34c0ffee0034")  # the namespace of the keys' ids

# The map run under way in this process: entity id -> the element to append; the ids the
# function was given (it changes nothing else).
MAPPING: dict[uuid.UUID, str] = {}
MAPPED: set[uuid.UUID] = set()


def entity_id(key: str) -> uuid.UUID:
    """A key's entity id: fixed, and spread over the buckets like any id."""
    return uuid.uuid5(KEYS, key)


def append_mapped(entity: Any) -> None:
    """The function ``map`` runs (by its dotted path, as ``mapentities`` would)."""
    element = MAPPING.get(entity.id)
    if element is None:
        return
    MAPPED.add(entity.id)
    entity["items"] = [*entity.get("items", []), element]


_APPLIED: list[bool] | None = None


def _server_applied() -> list[bool]:
    """Whether each ``server_updates.apply`` since the list was cleared changed the row (its
    ``added_id``), as this process's store ran it: the harness wraps the function once."""
    global _APPLIED
    if _APPLIED is None:
        from ...writes import server_updates

        seen: list[bool] = []
        real = server_updates.apply

        def apply(*args: Any, **kwargs: Any) -> Any:
            applied = real(*args, **kwargs)
            seen.append(bool(applied.added_id))
            return applied

        server_updates.apply = apply
        _APPLIED = seen
    return _APPLIED


class Operations:
    process: str
    index: int
    rng: random.Random
    epoch: float
    mine: dict[str, str]
    next_map: float = 0.0
    run: Callable[[str, str, Any], str]
    run_group: Callable[..., str]

    def generation(self) -> int:
        return int((time.monotonic() - self.epoch) / GENERATION)

    def step(self) -> None:
        rng = self.rng
        area = rng.choices(("list", "register", "claim", "cell"), (40, 40, 10, 10))[0]
        if area == "list":
            if self.process == "p0" and time.monotonic() >= self.next_map:
                self.next_map = time.monotonic() + MAP_EVERY
                self.map_lists()
                return
            f = "append" if rng.random() < 0.75 else "read"
            key = f"list-{self.generation()}-{rng.randrange(LIST_SLOTS)}"
        elif area == "cell":
            f = "cellput" if rng.random() < 0.7 else "read"
            key = f"cell-{self.generation()}-{rng.randrange(CELL_SLOTS)}"
        elif area == "claim":
            f = rng.choices(("claim", "delete", "read"), (50, 20, 30))[0]
            key = f"claim-{rng.randrange(CLAIM_SLOTS)}"
        else:
            f = rng.choices(
                ("save", "create", "write", "delete", "update", "bulk", "read", "find", "history"),
                (18, 10, 14, 10, 8, 6, 12, 14, 8),
            )[0]
            key = f"reg-{rng.randrange(REGISTER_SLOTS)}"
            if f == "bulk":
                self.bulk(key)
                return
            if f == "find":
                if not self.mine or not variant.value_indexed():
                    f = "read"
                else:
                    key = rng.choice(sorted(self.mine))
                    self.run(f, key, self.mine[key])
                    return
        value = None if f in ("read", "delete", "history") else f"{self.process}-{self.index}"
        if f == "claim":
            value = f"{value}@t{rng.randrange(TOKENS)}"
        if self.run(f, key, value) == "ok" and key.startswith("reg-"):
            if value is not None and f != "history":
                self.mine[key] = value
            elif f == "delete":
                self.mine.pop(key, None)

    # --- operations on several keys: a record per key --------------------------------------

    def bulk(self, key: str) -> None:
        from ...exceptions import ShardUnavailable
        from ...models import Entity

        other = f"reg-{(int(key.split('-')[1]) + 1) % REGISTER_SLOTS}"
        items = [(k, f"{self.process}-{self.index + n}") for n, k in enumerate((key, other))]

        def put() -> dict[str, tuple[str, dict[str, Any]]]:
            try:
                Entity.objects.bulk_put([{"id": entity_id(k), "value": v} for k, v in items])
            except Exception as exc:
                # A batch is one transaction per shard: a failure on one shard says nothing
                # of the other's, which may have committed. When the failure is a shard that
                # took nothing (refused before anything was sent), whatever committed did so
                # before the call returned: ``settled``, it cannot land later.
                error = f"{type(exc).__name__}: {exc}"[:300]
                settled = isinstance(exc, ShardUnavailable) and not exc.lost
                details = {"error": error, **({"settled": True} if settled else {})}
                return {k: ("info", details) for k, _ in items}
            return {k: ("ok", {}) for k, _ in items}

        if self.run_group("bulk", items, put) == "ok":
            self.mine.update(items)

    def map_lists(self) -> None:
        """``map_entities`` appending an element to each list of this generation: ``ok`` for
        a list the function was given in a run that finished, ``fail`` for one it never was
        given (it did not exist), ``info`` when no run finished."""
        from ...mapping import map_entities

        keys = [f"list-{self.generation()}-{slot}" for slot in range(LIST_SLOTS)]
        items = [(k, f"{self.process}-{self.index + n}") for n, k in enumerate(keys)]

        def run_map() -> dict[str, tuple[str, dict[str, Any]]]:
            MAPPING.clear()
            MAPPED.clear()
            MAPPING.update({entity_id(k): v for k, v in items})
            path = f"{__name__}.append_mapped"
            summary = map_entities(path, restart=True)
            until = time.monotonic() + MAP_RESUME_FOR
            while not summary.ok and time.monotonic() < until:
                time.sleep(1.0)
                summary = map_entities(path)
            if not summary.ok:
                raise RuntimeError(f"map run unfinished: {summary.problems[:2]}")
            return {
                k: ("ok", {}) if entity_id(k) in MAPPED else ("fail", {"error": "not there"})
                for k, _ in items
            }

        try:
            self.run_group("map", items, run_map)
        finally:
            MAPPING.clear()

    # --- the operations: each returns what its completion records ------------------------

    def do_read(self, key: str, value: Any) -> dict[str, Any]:
        """The value, or the list; ``via``: where the entity cache found it (``near``: this
        process's memory, with ``heard``, ``redis``, else the shard)."""
        from ...cache import entity_cache, near_cache
        from ...models import Cell, Entity

        if key.startswith("cell-"):
            versions = Cell.objects.versions(entity_id(key), CELL_COLUMN)
            return {"result": [(cell.body or {}).get("v") for cell in versions]}
        near, hits = entity_cache.stats.near_hits, entity_cache.stats.hits
        try:
            entity = Entity.objects.get(id=entity_id(key))
        except Entity.DoesNotExist:
            entity = None
        details: dict[str, Any] = {"via": "shard"}
        if entity_cache.stats.near_hits > near:
            # When the near cache's last answered PING was sent: every invalidation Redis
            # sent before then had been applied when it answered (docs/cache.md).
            copies = near_cache.existing()
            details = {"via": "near", "heard": copies.heard() if copies else None}
        elif entity_cache.stats.hits > hits:
            details = {"via": "redis"}
        if entity is None:
            return {"result": [] if key.startswith("list-") else None, **details}
        if key.startswith("list-"):
            return {"result": list(entity.get("items", [])), **details}
        return {"result": entity.get("value"), **details}

    def do_history(self, key: str, value: Any) -> dict[str, Any]:
        from ...cells.store import entity_history

        versions = entity_history(entity_id(key))
        return {
            "result": [
                None if v.properties is None else v.properties.get("value") for v in versions
            ]
        }

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

    def do_cellput(self, key: str, value: Any) -> dict[str, Any]:
        from ...models import Cell

        Cell.objects.put(entity_id(key), CELL_COLUMN, {"v": value})
        return {}

    def do_save(self, key: str, value: Any) -> dict[str, Any]:
        from ...models import Entity

        Entity.from_properties({"id": entity_id(key), "value": value}).save()
        return {}

    def do_claim(self, key: str, value: Any) -> dict[str, Any]:
        from ...models import Entity

        token = value.rpartition("@")[2]
        Entity.from_properties({"id": entity_id(key), "value": value, "claim": token}).save()
        return {}

    def do_create(self, key: str, value: Any) -> dict[str, Any]:
        from ...models import Entity

        Entity.objects.create(id=entity_id(key), value=value)
        return {}

    def do_update(self, key: str, value: Any) -> dict[str, Any]:
        from ...models import Entity

        applied = _server_applied()
        applied.clear()
        if not Entity.objects.filter(id=entity_id(key)).update(value=value):
            raise Entity.DoesNotExist(f"{key}: no entity to update")
        # The route it took (``via``; a summary counts the first, so that a run shows it was
        # put to the test): the server's one statement changed the row, or the store read it
        # under the lock (no server route, or the server changed nothing and the store fell
        # back to the read).
        return {"via": "server" if any(applied) else "locked read"}

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

"""One batch of a ``mapentities`` run: call the function on each entity, and save, through
the write protocol, what it changed.

Only entities whose properties changed are written, in one transaction per shard and batch,
each with ``if_unchanged`` (:mod:`..values.expected`): a user's write that landed since the batch
was
read makes that transaction fail with :class:`Conflict` before it writes anything; the
conflicting entities are read again (from the primary), the function is applied to what is
stored now, and the batch is written again. So a concurrent write is never lost, and the
function always sees the stored state it changes. An entity the function deletes
(:data:`schemaless_store.DELETE`) is deleted with the same check.

The transaction that saves an entity also notes it in ``schemaless_map_saved``
(:mod:`..tables.map_runs`), so no rerun applies the function to it again. Like ``bulk_put``,
the batch sends no ``pre_save``/``post_save`` signals. A batch whose commit answer was lost
is decided by its receipt (docs/design.md#receipts): one that landed is never written, nor its
entities' function applied, again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .. import DELETE
from ..exceptions import Conflict
from ..query.fetch import fetch_by_ids
from ..sql.values import db_datetime
from ..tables import entities as entity_table
from ..tables.map_runs import mark_saved
from ..topology import bucket_map, replicas, shards
from ..values import jsonview
from ..values.codec import decode_body
from ..values.expected import Expected
from ..writes import entity_writes
from ..writes.protocol import Change, SplitWrite, Write, run

# Tries per entity when users keep writing it between our read and our save.
ATTEMPTS = 10
EXAMPLES = 3


@dataclass
class Example:
    """A dry run's view of one change: the properties before and after, as JSON."""

    entity_id: str
    before: str
    after: str  # "DELETE" for a deletion


@dataclass
class BatchResult:
    seen: int = 0
    changed: int = 0
    deleted: int = 0
    conflicts: int = 0
    failures: list[tuple[bytes, str]] = field(default_factory=list)
    saved: list[bytes] = field(default_factory=list)  # the keys written (not deleted)


class Applier:
    """Applies ``fn`` to batches of entities of a run (``run``: its key,
    :mod:`..tables.map_runs`); ``dry_run`` computes the changes and writes nothing, keeping up
    to 3 :class:`Example`. ``rewrite``: an entity whose stored body differs from what the
    configured codec writes is saved even if its properties did not change (``rewritebodies``),
    keeping its ``updated`` time and adding no version to its history."""

    def __init__(
        self,
        model: Any,
        fn: Callable[[Any], Any],
        run: str,
        *,
        dry_run: bool = False,
        rewrite: bool = False,
    ) -> None:
        self.model = model
        self.fn = fn
        self.run = run
        self.dry_run = dry_run
        self.rewrite = rewrite
        self.examples: list[Example] = []

    def apply(self, entities: list[Any]) -> BatchResult:
        result = BatchResult(seen=len(entities))
        saves: dict[bytes, tuple[Any, Change]] = {}
        deletes: dict[bytes, Any] = {}
        tries: Counter[bytes] = Counter()

        def consider(entity: Any) -> None:
            key = bytes(entity.row_id)
            tries[key] += 1
            if tries[key] > ATTEMPTS:
                result.failures.append(
                    (key, f"changed by other writers under each of {ATTEMPTS} attempts")
                )
                return
            outcome = self._outcome(entity)
            if isinstance(outcome, str):
                result.failures.append((key, outcome))
            elif outcome is DELETE:
                deletes[key] = entity
            elif outcome is not None:
                saves[key] = (entity, outcome)

        for entity in entities:
            consider(entity)
        if self.dry_run:
            result.changed, result.deleted = len(saves), len(deletes)
            return result
        while saves or deletes:
            try:
                self._save(saves, result)
            except Conflict as conflict:
                for entity in self._reread(conflict, saves, result):
                    consider(entity)
                continue
            for key, entity in list(deletes.items()):
                del deletes[key]
                try:
                    result.deleted += entity.delete(if_unchanged=True)[0]
                except Conflict:
                    result.conflicts += 1
                    fresh = self._read(key)
                    if fresh is not None:
                        consider(fresh)
        return result

    def _outcome(self, entity: Any) -> Change | Any | str | None:
        """What the function makes of ``entity``: a :class:`Change` to save, ``DELETE``,
        None (nothing changed), or the message of a failure."""
        original = bytes(entity.row_body)
        returned: Any = DELETE  # until the function returns: its raising is a failure
        try:
            returned = self.fn(entity)
            if returned is DELETE:
                self._example(entity, original, None)
                return DELETE
            if returned is not None:
                return (
                    f"the function returned {type(returned).__name__}: it changes the entity "
                    "in place and returns None, or returns schemaless_store.DELETE"
                )
            change = entity_writes.prepare(entity)
        except Exception as exc:
            if returned is None and _unchanged(original, entity):
                return None  # nothing to write (another kind's, say), though it would not fit
            return f"{type(exc).__name__}: {exc}"
        if change.body == original:
            return None
        if not self.rewrite and decode_body(original) == entity.body_properties():
            return None
        change.expected = Expected(exists=True, body=original, added_id=entity.added_id)
        self._example(entity, original, entity.body_properties())
        return change

    def _example(self, entity: Any, original: bytes, after: dict[str, Any] | None) -> None:
        if self.dry_run and len(self.examples) < EXAMPLES:
            self.examples.append(
                Example(
                    str(entity.id),
                    jsonview.dumps(decode_body(original), indent=None),
                    "DELETE" if after is None else jsonview.dumps(after, indent=None),
                )
            )

    def _save(self, saves: dict[bytes, tuple[Any, Change]], result: BatchResult) -> None:
        """Write ``saves``, one transaction per shard; each group leaves ``saves`` as it
        commits (a :class:`Conflict` in a later group must not write it twice)."""
        groups: dict[str, list[bytes]] = {}
        for key in saves:
            groups.setdefault(bucket_map.alias_for(key), []).append(key)
        for alias, keys in groups.items():
            try:
                self._write(alias, [saves[key] for key in keys])
            except SplitWrite:  # the batch's buckets moved to several shards: one by one
                for key in keys:
                    self._write(bucket_map.alias_for(key), [saves[key]])
                    self._written(saves, result, [key])  # before a later item's Conflict
                continue
            self._written(saves, result, keys)

    @staticmethod
    def _written(
        saves: dict[bytes, tuple[Any, Change]], result: BatchResult, keys: list[bytes]
    ) -> None:
        """``keys`` committed: they leave ``saves`` (never written, nor mapped, again)."""
        for key in keys:
            del saves[key]
        result.changed += len(keys)
        result.saved.extend(keys)

    def _write(self, alias: str, items: list[tuple[Any, Change]]) -> None:
        write = Write(alias, [change for _entity, change in items])
        run(write, partial(self._store, entities=[entity for entity, _change in items]))

    def _store(self, write: Write, entities: list[Any]) -> dict[str, Any]:
        """Step 2: the entities, and the note that this run saved them, in one transaction."""
        if self.rewrite:
            result = self._store_bodies(write, entities)
        else:
            result = entity_writes.store_batch(write, entities)
        with shards.statement_cursor(write.conn) as cursor:
            mark_saved(
                cursor, write.conn.vendor, self.run, [change.key for change in write.changes]
            )
        return result

    def _store_bodies(self, write: Write, entities: list[Any]) -> dict[str, Any]:
        """A rewrite's step 2: the same properties in the codec's format, each entity keeping
        its ``updated`` time (a new format is not an edit), and no version in the history."""
        conn = write.conn
        updates = [
            (db_datetime(conn, entity.row_updated), change.body, change.key)
            for entity, change in zip(entities, write.changes, strict=True)
        ]
        with shards.statement_cursor(conn) as cursor:
            entity_table.write_many(cursor, [], updates)
        for entity, change in zip(entities, write.changes, strict=True):
            entity.row_body = change.body
        return {"written": len(updates)}

    def _reread(
        self, conflict: Conflict, saves: dict[bytes, tuple[Any, Change]], result: BatchResult
    ) -> list[Any]:
        """The conflicting entities as stored now (those deleted meanwhile are done with)."""
        keys = [key.bytes for key in conflict.ids if key.bytes in saves]
        if not keys:
            raise conflict
        for key in keys:
            del saves[key]
        result.conflicts += len(keys)
        with replicas.from_primary():
            found = fetch_by_ids(self.model, keys)
        return [found[key] for key in keys if key in found]

    def _read(self, key: bytes) -> Any | None:
        with replicas.from_primary():
            return fetch_by_ids(self.model, [key]).get(key)


def _unchanged(original: bytes, entity: Any) -> bool:
    try:
        return bool(decode_body(original) == entity.body_properties())
    except Exception:  # a body that does not decode has changed, or is refused
        return False

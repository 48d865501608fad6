"""Entity writes: ``save``, ``create``, ``bulk_put`` and ``delete``, each a run of the one
protocol (:mod:`.protocol`) with its own step 2, the statements on the ``entities`` row.

A single save or delete sends Django's signals around its row, as ``Model.save_base`` and
``Model.delete`` do (``pre_save``/``post_save`` with ``created``, ``pre_delete``/
``post_delete``), inside the transaction, so other receivers see them as they would for any
model; ``bulk_put``, like Django's ``bulk_create``, sends none. With entity history on
(``SCHEMALESS["HISTORY"]``) the version is appended as an ``_entity`` cell in the same
transaction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, Protocol
from uuid import UUID

from django.db import DatabaseError
from django.db.models.base import ModelState
from django.db.models.signals import (
    ModelSignal,
    post_delete,
    post_save,
    pre_delete,
    pre_save,
)
from django.utils import timezone

from ..config import conf
from ..exceptions import EntityExists, NotOwner
from ..sql.values import db_datetime
from ..tables import cells as cell_table
from ..tables import entities as entity_table
from ..tables.lifecycle import maintained_indexes
from ..topology import bucket_map, shards
from ..values import bounds, expected
from ..values.codec import decode_body
from . import server_updates, with_commit
from .protocol import Change, SplitWrite, Write, run
from .rows import encode_body, rows_of


class EntityRecord(Protocol):
    """What the writes read and set of an entity (:class:`~..models.entity.Entity`, the model
    above this layer that calls them)."""

    added_id: Any
    row_id: Any
    row_updated: datetime
    row_body: Any
    has_generated_id: bool
    _state: ModelState

    @property
    def id(self) -> UUID: ...

    def body_properties(self) -> dict[str, Any]: ...


def prepare(entity: EntityRecord, *, fresh: bool = False) -> Change:
    """The change an entity's properties make: body and index rows, computed and validated
    before anything is written (``fresh``: its id is not read first, :class:`Change`)."""
    properties = entity.body_properties()
    key = bytes(entity.row_id)
    return Change(
        key=key,
        rows=rows_of(properties),
        body=encode_body(properties, key),
        fresh=fresh,
        seen=not (fresh and entity.has_generated_id),
    )


def only_fields(update_fields: Iterable[str] | None) -> frozenset[str] | None:
    """``save(update_fields=...)`` as a set of property names, checked (Django's
    ``ValueError`` for a name that cannot be one; the id never changes)."""
    if update_fields is None:
        return None
    if isinstance(update_fields, str):
        update_fields = [update_fields]
    names = frozenset(update_fields)
    bad = sorted(repr(name) for name in names if not isinstance(name, str) or name == "id")
    if bad:
        raise ValueError(
            f"update_fields names the properties to write; {', '.join(bad)} cannot be one "
            "(an entity's id never changes)"
        )
    return names


def save(
    entity: EntityRecord,
    *,
    force_insert: bool = False,
    if_unchanged: bool = False,
    expect: expected.Expected | None = None,
    update_fields: Iterable[str] | None = None,
) -> None:
    """Insert or update one entity (``force_insert``: insert, or :class:`EntityExists`;
    ``if_unchanged``: only if the stored row is still what the instance read, or ``expect``
    says, else :class:`~..exceptions.Conflict`; ``update_fields``: only those properties'
    values, over the stored body read under the lock, see :func:`_partial_change`)."""
    only = only_fields(update_fields)
    if only is not None and force_insert:
        raise ValueError("save() cannot force an insert and write only some properties")
    if only is not None and not only:
        return  # as Django: an empty update_fields saves nothing, and sends no signal
    # An insert is not read first: its INSERT locks the key, and a duplicate key (an id that
    # exists) fails it, before any index row is added (EntityExists).
    if only is None:
        change = prepare(entity, fresh=force_insert)
    else:
        # Body and rows come from the stored body, in step 2 (_partial_change): the
        # instance's other properties are neither written nor validated.
        change = Change(key=bytes(entity.row_id), rows=set(), only=only)
    if expect is None and if_unchanged:
        expect = expected.of(entity)
    change.expected = expect
    quiet = not _heard(pre_save, post_save, type(entity))
    if only is not None and expect is None and quiet and server_updates.save_fields(entity, only):
        return
    quiet = quiet and not _may_claim(only)  # then no receiver sees the row before the COMMIT
    alias = bucket_map.alias_for(change.key)
    write = Write(alias, [change], insert_only=force_insert, quiet=quiet, defers=quiet)
    run(write, partial(_store_one, entity=entity))
    if write.recalled:
        # The commit of a try whose answer was lost landed: its receipt is the answer (what
        # that try set on the instance stands; the stored row may have changed since).
        entity.added_id = write.result["added_id"]
        entity._state.adding = False
        entity._state.db = write.alias
    entity.has_generated_id = False


def _store_one(write: Write, entity: EntityRecord) -> dict[str, Any]:
    """Step 2 of a save: ``pre_save``, the row, its version in the history, ``post_save``."""
    change = write.changes[0]
    if change.found is not None and write.insert_only:
        raise EntityExists(f"an entity with id {entity.id} already exists")
    if change.only is not None:
        _partial_change(change, entity)
    alias, conn = write.alias, write.conn
    now = timezone.now()
    stamp = db_datetime(conn, now)
    cls = type(entity)
    entity.row_updated = now
    entity.row_body = change.body
    pre_save.send(sender=cls, instance=entity, raw=False, using=alias, update_fields=change.only)
    history = conf.get().history
    carrier = write.carrier(len(change.body) * (2 if history else 1))
    if carrier is not None:
        result = with_commit.save(write, carrier, entity, stamp, history)
    else:
        result = _store_one_now(write, entity, stamp, history)
    entity._state.adding = False
    entity._state.db = alias
    post_save.send(
        sender=cls,
        instance=entity,
        created=change.found is None,
        update_fields=change.only,
        raw=False,
        using=alias,
    )
    return result


def _store_one_now(write: Write, entity: EntityRecord, stamp: Any, history: bool) -> dict[str, Any]:
    change, alias = write.changes[0], write.alias
    with shards.statement_cursor(write.conn) as cursor:
        if change.found is None and write.fenced_by_insert:
            added = entity_table.insert_one_fenced(
                cursor, change.key, stamp, change.body, write.buckets[0]
            )
            if added is None:
                raise NotOwner(alias, set(write.buckets))
            entity.added_id = added
        elif change.found is None:
            entity.added_id = entity_table.insert_one(cursor, change.key, stamp, change.body)
        else:
            entity.added_id = change.found.added_id
            entity_table.update_one(cursor, change.key, stamp, change.body)
        if history:
            cell_table.append_entity_versions(cursor, [(change.key, change.body)], stamp)
    return {"added_id": int(entity.added_id), "created": int(change.found is None)}


def _partial_change(change: Change, entity: EntityRecord) -> None:
    """``save(update_fields=...)``'s step 2 before its statement: the body to write is the
    stored one (read under the lock in step 1, so no other writer's change is lost) with the
    named properties as the instance has them (a name it lacks is removed); its other
    properties, stored or not, stay as they are."""
    if change.found is None:
        # Django's answer to update_fields on a row that is not there.
        raise DatabaseError(
            f"save(update_fields=...) needs a stored entity; entity {entity.id} does not exist"
        )
    mine = entity.body_properties()
    _merge(change, {name: mine.get(name, _ABSENT) for name in change.only or ()})


_ABSENT = server_updates.ABSENT  # a property to remove


def _may_claim(names: frozenset[str] | None) -> bool:
    """Whether a partial change of ``names`` may claim a unique index row: it learns its rows
    in step 2, too late for :func:`.transaction.shard_transaction` to see the claim, which
    may check its holder under ``atomic()`` on this connection. Only a unique index over one
    of the names can change its row."""
    return names is not None and any(
        index.unique and names & set(index.properties) for index in maintained_indexes()
    )


def _merge(change: Change, values: Mapping[str, Any]) -> None:
    """Set ``change``'s body and rows: its stored body (read in step 1) with ``values`` set
    (``_ABSENT``: removed). A bad value raises here, before anything is written."""
    if change.found is None:
        stored: Mapping[str, Any] = {}
    elif change.stored is not None:  # decoded in step 1 (never changed: a copy is set below)
        stored = change.stored
    else:  # undecodable: CorruptBody, before anything is written
        stored = decode_body(bytes(change.found.body or b""))
    properties = dict(stored)
    for name, value in values.items():
        if value is _ABSENT:
            properties.pop(name, None)
        else:  # an F() reads the stored value
            properties[name] = server_updates.resolve(value, stored)
    change.rows = rows_of(properties)
    change.body = encode_body(properties, change.key)


def update_ids(keys: Sequence[bytes], values: Mapping[str, Any], batch_size: int = 500) -> int:
    """Set ``values`` on the stored entities among ``keys`` (``filter(id__in=...).update()``):
    one protocol run per shard and batch, each row merged with its body read under the lock
    in step 1, its index rows following; no signals (as Django's ``update()``). Returns the
    number of entities changed (a missing id counts 0)."""
    names = only_fields(values)
    if not names:
        return 0
    unique = list(dict.fromkeys(keys))
    if len(unique) == 1 and server_updates.applies_here(unique[0]):
        how = server_updates.plan(values)
        if how is not None:
            applied = server_updates.apply(unique[0], how, timezone.now(), want_body=False)
            if applied.added_id:
                return 1
            # Missing, or not a JSON body: the read-under-lock route below decides.
    by_alias: dict[str, list[bytes]] = defaultdict(list)
    for key in dict.fromkeys(keys):
        by_alias[bucket_map.alias_for(key)].append(key)
    quiet = not _may_claim(names)
    total = 0
    for alias, group in by_alias.items():
        for start in range(0, len(group), batch_size):
            chunk = group[start : start + batch_size]
            changes = [Change(key=key, rows=set(), only=names) for key in chunk]
            # A batch's statements go as they come; one row's, with the COMMIT.
            write = Write(alias, changes, quiet=quiet, defers=len(changes) == 1)
            try:
                run(write, partial(_store_updates, values=values))
            except SplitWrite:  # its buckets moved to several shards: regrouped
                total += update_ids(chunk, values, batch_size)
                continue
            total += write.result["updated"]
    return total


def _store_updates(write: Write, values: Mapping[str, Any]) -> dict[str, Any]:
    """Step 2 of :func:`update_ids`: each stored row merged, then their ``UPDATE``s and
    versions; a missing row is left out (its change implies no rows)."""
    found = [change for change in write.changes if change.found is not None]
    for change in found:
        _merge(change, values)
    now = timezone.now()
    stamp = db_datetime(write.conn, now)
    history = conf.get().history
    carrier = write.carrier(sum(len(c.body) for c in found) * (2 if history else 1))
    if carrier is not None:  # one row: its UPDATE and version go with the COMMIT
        with_commit.update(carrier, [(c.key, c.body) for c in found], stamp, history)
        return {"updated": len(found)}
    with shards.statement_cursor(write.conn) as cursor:
        entity_table.write_many(cursor, [], [(stamp, c.body, c.key) for c in found])
        if found and history:
            cell_table.append_entity_versions(cursor, [(c.key, c.body) for c in found], stamp)
    return {"updated": len(found)}


def _heard(before: ModelSignal, after: ModelSignal, sender: type) -> bool:
    """Whether anything listens to either signal for ``sender`` (a quick "no receivers at all"
    first: asking Django for the live receivers costs more)."""
    return bool(
        (before.receivers and before.has_listeners(sender))
        or (after.receivers and after.has_listeners(sender))
    )


def put_many(entities: Sequence[EntityRecord], batch_size: int = 500) -> None:
    """Insert or replace many entities, one protocol run per shard and batch, no signals.

    Every entity is validated before anything is written. A later item with the same id as an
    earlier one wins.
    """
    check_batch_size(batch_size)
    changes = [prepare(entity, fresh=entity.has_generated_id) for entity in entities]
    put_prepared(entities, changes, batch_size)


def check_batch_size(batch_size: object) -> None:
    if not bounds.whole(batch_size):
        raise ValueError(f"batch_size must be a whole number of at least 1, not {batch_size!r}")


def put_prepared(
    entities: Sequence[EntityRecord],
    changes: Sequence[Change],
    batch_size: int = 500,
    *,
    skip_unchanged: bool = False,
    history: bool = True,
    written: list[int] | None = None,
) -> int:
    """Write entities whose changes :func:`prepare` computed (``put_many``'s second half);
    returns how many rows were written. ``written[0]``, if given, grows as each batch commits,
    so a caller learns what was written before a batch raised.

    ``skip_unchanged``: an entity whose stored body (read under its lock in step 1) is the
    body to write is left as it is: no ``UPDATE``, no new version in its history (a rerun
    import writes nothing twice). ``history=False``: no ``_entity`` version is appended even
    when ``SCHEMALESS["HISTORY"]`` is on (an import that restores the history itself).
    """
    by_alias: dict[str, dict[bytes, tuple[EntityRecord, Change]]] = defaultdict(dict)
    for entity, change in zip(entities, changes, strict=True):
        by_alias[bucket_map.alias_for(change.key)][change.key] = (entity, change)
    total = 0
    for alias, items in by_alias.items():
        batch = list(items.values())
        for start in range(0, len(batch), batch_size):
            chunk = batch[start : start + batch_size]
            write = Write(alias, [change for _entity, change in chunk])
            store = partial(
                store_batch,
                entities=[entity for entity, _change in chunk],
                skip_unchanged=skip_unchanged,
                history=history,
            )
            try:
                run(write, store)
            except SplitWrite:
                # Some of the batch's buckets moved to other shards: write it where it is now.
                total += put_prepared(
                    [entity for entity, _change in chunk],
                    [change for _entity, change in chunk],
                    batch_size,
                    skip_unchanged=skip_unchanged,
                    history=history,
                    written=written,
                )
                continue
            # Set by the batch's committed try, or recorded by its receipt.
            total += write.result["written"]
            if written is not None:
                written[0] += write.result["written"]
    return total


def store_batch(
    write: Write,
    entities: list[EntityRecord],
    skip_unchanged: bool = False,
    history: bool = True,
) -> dict[str, Any]:
    """Step 2 of a batch: its inserts and updates, and their versions in the history (a
    caller with statements of its own in the same transaction wraps it: mapentities)."""
    conn = write.conn
    now = timezone.now()
    stamp = db_datetime(conn, now)
    inserts, updates, versions = [], [], []
    unchanged: set[bytes] = set()
    for change in write.changes:
        if change.found is None:
            inserts.append((change.key, stamp, change.body))
        elif skip_unchanged and change.found.body == change.body:
            unchanged.add(change.key)
            continue
        else:
            updates.append((stamp, change.body, change.key))
        versions.append((change.key, change.body))
    with shards.statement_cursor(conn) as cursor:
        entity_table.write_many(cursor, inserts, updates)
        if history and versions and conf.get().history:
            cell_table.append_entity_versions(cursor, versions, stamp)
    for entity, change in zip(entities, write.changes, strict=True):
        if change.key not in unchanged:
            entity.row_updated = now
        entity.row_body = change.body
        if change.found is not None:
            entity.added_id = change.found.added_id  # a new row's is not read back
        entity._state.adding = False
        entity._state.db = write.alias
        entity.has_generated_id = False
    return {"written": len(versions)}


def delete(entity: EntityRecord, *, if_unchanged: bool = False) -> int:
    """Delete one entity (``pre_delete``/``post_delete`` around its row), then its index rows
    (step 5 removes every row it implied); 1, or 0 if it did not exist. ``if_unchanged``: only
    if the stored row is still what the instance read, else :class:`~..exceptions.Conflict`."""
    key = bytes(entity.row_id)
    quiet = not _heard(pre_delete, post_delete, type(entity))
    write = Write(
        bucket_map.alias_for(key),
        [Change(key, rows=set(), expected=expected.of(entity) if if_unchanged else None)],
        quiet=quiet,
        defers=quiet,  # no receiver to see the row go before the commit
    )
    run(write, partial(_delete_one, entity=entity))
    deleted = write.result["deleted"]
    if deleted:
        entity.added_id = None  # as Django's delete leaves an instance
    return deleted


def _delete_one(write: Write, entity: EntityRecord) -> dict[str, Any]:
    change = write.changes[0]
    if change.found is None:
        return {"deleted": 0}
    alias = write.alias
    conn = write.conn
    cls = type(entity)
    entity.added_id = change.found.added_id
    pre_delete.send(sender=cls, instance=entity, using=alias, origin=entity)
    history = conf.get().history
    stamp = db_datetime(conn, timezone.now())
    carrier = write.carrier(0)
    if carrier is not None:  # with the COMMIT: the row, locked in step 1, is there to delete
        with_commit.delete(carrier, change.key, stamp, history)
    else:
        with shards.statement_cursor(conn) as cursor:
            if not entity_table.delete_one(cursor, change.key):
                return {"deleted": 0}
            if history:
                cell_table.append_entity_versions(cursor, [(change.key, None)], stamp)
    post_delete.send(sender=cls, instance=entity, using=alias, origin=entity)
    return {"deleted": 1}

"""The write path: DESIGN section 3, in the order that makes crashes harmless.

For every put, on the shard that owns the entity, in one transaction:

1. lock the entity's row with ``SELECT ... FOR UPDATE`` and learn its current properties (a
   brand-new entity has no row yet; its ``INSERT`` in step 2 locks it);
2. write the entity row (``INSERT`` or ``UPDATE``; not committed yet, still locked);
3. add the index rows whose keys are new, committed at once on the index shards' own
   connections: every row the entity will need exists *before the entity commits*;
4. commit.

Then, only if keys went away: lock the row again, re-check that the entity still lacks each key
(a later writer may have put it back), and delete those index rows.

Index rows are added while the entity's row lock is held. A writer removing a key re-checks under
that same lock, so it cannot remove a row a concurrent put still needs; and a unique-index claim
that collides with another entity's row can check that entity under its lock (see
:func:`_claim_unique`). A crash at any point leaves at worst an extra index row, which queries
ignore (they re-check every entity) and the cleaner removes.

Single saves go through Django's ``save()``: the ``pre_save`` receiver runs step 1, Django writes
the row, the ``post_save`` receiver runs step 3 and schedules the removal for after the commit
(:mod:`.signals`). ``bulk_put`` runs the same steps over batches.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from . import cells, conf, lifecycle, literals, shards
from .codec import decode_body
from .exceptions import (
    BodyTooLarge,
    CorruptBody,
    EntityExists,
    IndexValueError,
    InvalidEntityError,
    ShardUnavailable,
    UniqueViolation,
)
from .indexes import ENTITIES, Index, Source
from .lifecycle import maintained_indexes
from .signals import only_store_receivers

if TYPE_CHECKING:
    from .models import Entity

logger = logging.getLogger(__name__)

RowSet = set[tuple[Index, tuple[Any, ...]]]


@dataclass
class PreparedWrite:
    """Everything a put needs, computed (and validated) before anything is written."""

    entity_id: bytes
    alias: str
    body: bytes
    rows: RowSet
    force_insert: bool = False
    skip_lock: bool = False
    old: RowSet = field(default_factory=set)  # rows the stored entity implied (read under lock)
    added: RowSet = field(default_factory=set)  # rows this write inserted (to undo on failure)


def prepare(entity: Entity, force_insert: bool = False) -> PreparedWrite:
    """Encode the body and compute the index rows; raises on bad input, writes nothing."""
    settings = conf.get()
    properties = entity.body_properties()
    for name in properties:
        if not isinstance(name, str):
            raise InvalidEntityError(f"property names are strings, not {type(name).__name__}")
    body = settings.codec.encode(properties)
    if len(body) > settings.max_body_bytes:
        raise BodyTooLarge(
            f"entity {entity.id}: body is {len(body)} bytes once encoded; "
            f"the limit (SCHEMALESS['MAX_BODY_BYTES']) is {settings.max_body_bytes}"
        )
    entity_id = bytes(entity.row_id)
    return PreparedWrite(
        entity_id=entity_id,
        alias=shards.alias_for(entity_id),
        body=body,
        rows=rows_of(properties),
        force_insert=force_insert,
        # A freshly generated uuid4 cannot exist yet: its INSERT alone locks it.
        skip_lock=force_insert and getattr(entity, "_generated_id", False),
    )


def rows_of(
    properties: Mapping[str, Any], *, strict: bool = True, column: str | None = None
) -> RowSet:
    """Every (index, row) an entity's properties imply, over the maintained indexes (with
    ``column``: the indexes over that cell column, for a version of it).

    With ``strict=False`` (reading old state), an index whose values no longer fit is skipped:
    its rows, if any, are the cleaner's to sweep. Even when strict, an index still ``building``
    is skipped (with a warning) rather than failing the write: it serves no query yet, and its
    backfill reports the entity as not indexed.
    """
    rows: RowSet = set()
    for index in maintained_indexes():
        if index.column != column:
            continue
        try:
            rows.update((index, row) for row in index.rows_for(properties))
        except IndexValueError as exc:
            if not strict:
                continue
            if lifecycle.state_of(index) != lifecycle.BUILDING:
                raise
            logger.warning(
                "index %s is still building and cannot index this entity (%s); the write goes "
                "on without its row",
                index.name,
                exc,
            )
    return rows


def stored_rows(entity_id: bytes, body: bytes | None, source: Source = ENTITIES) -> RowSet:
    if body is None:
        return set()
    try:
        return rows_of(decode_body(bytes(body)), strict=False, column=source.column)
    except CorruptBody:
        logger.warning(
            "%s %s has an undecodable body; its old index rows are left to the cleaner",
            source.noun,
            entity_id.hex(),
        )
        return set()


# --- SQL helpers (hot path: raw statements, batched) ---------------------------------------


def lock_current(
    alias: str, ids: list[bytes], source: Source = ENTITIES
) -> dict[bytes, tuple[int, bytes | None]]:
    """``{id: (added_id, body)}`` for the ids that exist, locked until the transaction ends."""
    conn = shards.connection(alias)
    suffix = " FOR UPDATE" if conn.features.has_select_for_update else ""
    extra, extra_params = source.where()
    key = source.id_column
    found: dict[bytes, tuple[int, bytes | None]] = {}
    with shards.statement_cursor(conn) as cursor:
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(
                f"SELECT {key}, added_id, body FROM {source.table} "
                f"WHERE {key} IN ({marks}){extra}{suffix}",
                [*chunk, *extra_params],
            )
            for row_id, added_id, body in cursor.fetchall():
                found[bytes(row_id)] = (added_id, None if body is None else bytes(body))
    return found


def _group(
    rows: Iterable[tuple[Index, tuple[Any, ...], bytes]],
) -> dict[tuple[Index, str], list[tuple[Any, ...]]]:
    groups: dict[tuple[Index, str], list[tuple[Any, ...]]] = defaultdict(list)
    # (type, shard_on column value) -> alias: an entity's indexes often share it. The type is
    # part of the key: True, 1 and 1.0 are equal in Python but route as different values.
    routed: dict[tuple[type, Any], str] = {}
    for index, row, entity_id in rows:
        value = row[index.shard_position]
        key = (type(value), value)
        alias = routed.get(key)
        if alias is None:
            alias = routed[key] = shards.alias_for(index.routing_key(value))
        groups[index, alias].append((*row, entity_id))
    return groups


def add_index_rows(rows: Iterable[tuple[Index, tuple[Any, ...], bytes]]) -> None:
    """Insert index rows idempotently, one batched statement per (index, shard).

    Rows of unique indexes are claimed one by one first (:func:`_claim_unique`).
    """
    rows = list(rows)
    plain = []
    for index, values, entity_id in rows:
        if index.unique:
            _claim_unique(index, values, entity_id)
        else:
            plain.append((index, values, entity_id))
    for (index, alias), values in _group(plain).items():
        conn = shards.index_connection(alias)
        quote = conn.ops.quote_name
        with shards.errors_named(alias), shards.statement_cursor(conn) as cursor:
            mysql = _mysql_insert(index, quote) if conn.vendor == "mysql" else None
            if mysql is not None:
                for sql in mysql.statements(values):
                    cursor.execute(sql)
            elif len(values) == 1:  # executemany's statement rewriting costs more than it saves
                cursor.execute(_insert_sql(index, conn.vendor, quote), values[0])
            else:
                cursor.executemany(_insert_sql(index, conn.vendor, quote), values)


# Per index object (a redeclared index is another object; one no longer referenced drops out):
# its multi-row INSERT on MySQL.
_MYSQL_INSERT: weakref.WeakKeyDictionary[Index, literals.Insert | None] = (
    weakref.WeakKeyDictionary()
)


def _mysql_insert(index: Index, quote: Callable[[str], str]) -> literals.Insert | None:
    """The idempotent multi-row ``INSERT`` of ``index`` on MySQL, its rows written as literals
    (:mod:`.literals`); None when a column type does not say what its values are (then the
    driver renders them)."""
    try:
        return _MYSQL_INSERT[index]
    except KeyError:
        pass
    types = [index.columns[p].python_type for p in index.properties]
    insert = None
    if all(t in literals.TYPES for t in types):
        head, tail = _insert_text(index, "mysql", quote)
        insert = literals.Insert(head, literals.RowFormat([*types, bytes]), tail)
    _MYSQL_INSERT[index] = insert
    return insert


def _insert_text(index: Index, vendor: str, quote: Callable[[str], str]) -> tuple[str, str]:
    """The idempotent ``INSERT`` of ``index`` around its rows: the text before and after."""
    columns = ", ".join(quote(c) for c in (*index.properties, "entity_id"))
    if vendor == "mysql":
        entity_col = quote("entity_id")
        return (
            f"INSERT INTO {quote(index.name)} ({columns}) VALUES ",
            f" ON DUPLICATE KEY UPDATE {entity_col} = {entity_col}",
        )
    return f"INSERT OR IGNORE INTO {quote(index.name)} ({columns}) VALUES ", ""


_INSERT_SQL: dict[tuple[str, tuple[str, ...], str], str] = {}


def _insert_sql(index: Index, vendor: str, quote: Callable[[str], str]) -> str:
    """The idempotent ``INSERT`` of one row of ``index`` with placeholders, for the driver to
    fill (SQLite; MySQL when a column type does not say what its values are)."""
    key = (index.name, index.properties, vendor)
    sql = _INSERT_SQL.get(key)
    if sql is None:
        head, tail = _insert_text(index, vendor, quote)
        marks = ", ".join(["%s"] * (len(index.properties) + 1))
        sql = _INSERT_SQL[key] = f"{head}({marks}){tail}"
    return sql


def _claim_unique(index: Index, values: tuple[Any, ...], entity_id: bytes) -> None:
    """Insert a unique index row, or raise :class:`UniqueViolation` if another entity holds it.

    Like Vitess's consistent lookup vindex: the claim is made before the entity commits. A row
    already held by another entity is checked under that entity's lock: if the holder does not
    imply it any more (a crashed or failed write, or a pending removal), the stale claim is
    deleted and the claim retried; otherwise the value is taken.
    """
    alias = shards.alias_for(index.routing_key(values[index.shard_position]))
    conn = shards.index_connection(alias)
    quote = conn.ops.quote_name
    columns = ", ".join(quote(c) for c in (*index.properties, "entity_id"))
    match = " AND ".join(f"{quote(p)} = %s" for p in index.properties)
    insert = (
        f"INSERT INTO {quote(index.name)} ({columns}) "
        f"VALUES ({', '.join(['%s'] * (len(values) + 1))})"
    )
    for _attempt in range(5):
        # On SQLite the claim shares the entity's transaction: a savepoint keeps it usable.
        savepoint = (
            transaction.atomic(using=alias) if conn.in_atomic_block else contextlib.nullcontext()
        )
        try:
            with shards.errors_named(alias), savepoint, conn.cursor() as cursor:
                cursor.execute(insert, [*values, entity_id])
            return
        except IntegrityError:
            pass
        with shards.errors_named(alias), conn.cursor() as cursor:
            cursor.execute(
                f"SELECT {quote('entity_id')} FROM {quote(index.name)} WHERE {match}", list(values)
            )
            found = cursor.fetchone()
        if found is None:
            continue  # released meanwhile
        holder = bytes(found[0])
        if holder == entity_id:
            return
        if _holder_keeps_claim(index, values, holder):
            raise UniqueViolation(
                f"index {index.name!r}: {', '.join(index.properties)} = "
                f"{index.describe(values)} is already taken by entity {holder.hex()}",
                index=index.name,
                values=values,
            )
    raise UniqueViolation(
        f"index {index.name!r}: {index.describe(values)} is contended; try again",
        index=index.name,
        values=values,
    )


def _holder_keeps_claim(index: Index, values: tuple[Any, ...], holder: bytes) -> bool:
    """True if ``holder`` implies the row; if not, delete its stale claim (under its lock)."""
    holder_alias = shards.alias_for(holder)
    with shards.errors_named(holder_alias), transaction.atomic(using=holder_alias):
        current = lock_current(holder_alias, [holder])
        held = stored_rows(holder, current.get(holder, (None, None))[1])
        if (index, values) in held:
            return True
        delete_index_rows([(index, values, holder)])
        return False


def delete_index_rows(rows: Iterable[tuple[Index, tuple[Any, ...], bytes]]) -> int:
    """Delete index rows, batched with row-value ``IN`` lists per (index, shard)."""
    deleted = 0
    unavailable: ShardUnavailable | None = None
    for (index, alias), values in _group(rows).items():
        conn = shards.index_connection(alias)
        ops = conn.ops
        columns = ", ".join(ops.quote_name(c) for c in (*index.properties, "entity_id"))
        one = "(" + ", ".join(["%s"] * (len(index.properties) + 1)) + ")"
        try:
            with shards.errors_named(alias), conn.cursor() as cursor:
                for start in range(0, len(values), 200):
                    chunk = values[start : start + 200]
                    cursor.execute(
                        f"DELETE FROM {ops.quote_name(index.name)} WHERE ({columns}) IN "
                        f"({', '.join([one] * len(chunk))})",
                        [v for row in chunk for v in row],
                    )
                    deleted += cursor.rowcount
        except ShardUnavailable as exc:
            unavailable = unavailable or exc  # stale rows are harmless: clean the other shards
    if unavailable is not None:
        raise unavailable
    return deleted


def _with_entity(rows: RowSet, entity_id: bytes) -> list[tuple[Index, tuple[Any, ...], bytes]]:
    return [(index, row, entity_id) for index, row in rows]


# --- removal of keys an entity no longer has (step 3) --------------------------------------


def remove_stale(alias: str, candidates: Mapping[bytes, RowSet], source: Source = ENTITIES) -> int:
    """Delete candidate rows that the (locked, current) entities do not imply. Returns count.

    ``source``: where the current properties are (entities, or a cell column's latest version).
    """
    if not any(candidates.values()):
        return 0

    def attempt() -> int:
        failure: ShardUnavailable | None = None
        with transaction.atomic(using=alias):
            current = lock_current(alias, list(candidates), source)
            doomed = []
            for entity_id, rows in candidates.items():
                now = stored_rows(entity_id, current.get(entity_id, (None, None))[1], source)
                doomed.extend(_with_entity(rows - now, entity_id))
            try:
                deleted = delete_index_rows(doomed)
            except ShardUnavailable as exc:
                # Keep what was deleted on the shards that answered (on SQLite those deletes
                # share this transaction), then report the one that did not.
                failure, deleted = exc, 0
        if failure is not None:
            raise failure
        return deleted

    with shards.write_lock(), shards.errors_named(alias):
        return shards.with_retries(attempt, alias)


def _remove_stale_later(
    alias: str, candidates: Mapping[bytes, RowSet], source: Source = ENTITIES
) -> None:
    try:
        remove_stale(alias, candidates, source)
    except Exception:
        # The entity is committed; its leftover rows are invisible to queries (re-check) and
        # swept by the cleaner. Report, but do not fail a write that succeeded.
        logger.exception("removing stale index rows on %s failed; the cleaner will do it", alias)


# --- single save / delete, through Django's save() and signals -----------------------------


def save(entity: Entity, force_insert: bool = False, prepared: PreparedWrite | None = None) -> None:
    """Save one entity: ``pre_save`` locks and adds index rows, ``post_save`` schedules removal."""
    prepared = prepared or prepare(entity, force_insert)

    def attempt() -> None:
        entity._pending_write = prepared  # type: ignore[attr-defined]
        try:
            with transaction.atomic(using=prepared.alias):
                models.Model.save_base(entity, using=prepared.alias)
        except IntegrityError as exc:
            if prepared.force_insert:
                raise EntityExists(f"an entity with id {entity.id} already exists") from exc
            raise _ConcurrentInsert from exc  # someone created it meanwhile: update instead
        finally:
            entity._pending_write = None  # type: ignore[attr-defined]

    with shards.write_lock():
        try:
            with shards.errors_named(prepared.alias):
                _retry_concurrent_insert(lambda: shards.with_retries(attempt, prepared.alias))
        except BaseException:
            _undo_added(prepared.alias, {prepared.entity_id: prepared.added})
            raise
    entity._generated_id = False  # type: ignore[attr-defined]


def create(entity: Entity) -> None:
    """Insert a new entity (``Entity.objects.create``); :class:`EntityExists` if its id exists.

    An entity whose id the store generated cannot exist yet. On MySQL, when nothing but the
    store listens to ``pre_save``/``post_save``, Django is not recording queries, no
    transaction is open and no unique index is involved, the insert skips Django's ``save()``:
    the same statements in the same order (entity row, index rows committed, entity committed)
    on the driver's connection, in ``BEGIN`` ... ``COMMIT``. Any other case is a normal
    ``save(force_insert=True)``, signals and all.
    """
    prepared = prepare(entity, force_insert=True)
    conn = shards.connection(prepared.alias)
    # A unique claim may check its holder under Django's atomic() on this very connection:
    # that needs Django's own transaction.
    unique = any(index.unique for index, _row in prepared.rows)
    if unique or not (prepared.skip_lock and _can_insert_directly(conn)):
        save(entity, force_insert=True, prepared=prepared)
        return
    try:
        with shards.errors_named(prepared.alias):
            shards.with_retries(partial(_insert_directly, conn, entity, prepared), prepared.alias)
    except BaseException:
        _undo_added(prepared.alias, {prepared.entity_id: prepared.added})
        raise
    entity._generated_id = False  # type: ignore[attr-defined]


def _can_insert_directly(conn: Any) -> bool:
    return (
        conn.vendor == "mysql"
        and not conf.get().history
        and not conn.in_atomic_block
        and not conn.queries_logged
        and only_store_receivers()
    )


def _insert_directly(conn: Any, entity: Entity, prepared: PreparedWrite) -> None:
    """DESIGN section 3 for a brand-new entity, on the driver's connection."""
    now = timezone.now()
    # What conn.ops.adapt_datetimefield_value(now) gives on MySQL, without its checks.
    stored = str(now.astimezone(conn.timezone).replace(tzinfo=None) if settings.USE_TZ else now)
    conn.validate_thread_sharing()
    conn.ensure_connection()
    driver = conn.connection
    with conn.wrap_database_errors:
        cursor = driver.cursor()
        try:
            cursor.execute("BEGIN")
            try:
                cursor.execute(
                    "INSERT INTO entities (id, updated, body) VALUES (%s, %s, %s)",
                    (prepared.entity_id, stored, prepared.body),
                )
                added_id = cursor.lastrowid
                prepared.added |= prepared.rows
                add_index_rows(_with_entity(prepared.rows, prepared.entity_id))
                driver.commit()
            except BaseException:
                with contextlib.suppress(Exception):
                    driver.rollback()
                raise
        except IntegrityError as exc:
            raise EntityExists(f"an entity with id {entity.id} already exists") from exc
        finally:
            cursor.close()
    entity.added_id = added_id
    entity.row_updated = now
    entity.row_body = prepared.body
    entity._state.adding = False
    entity._state.db = prepared.alias


def _undo_added(alias: str, added: Mapping[bytes, RowSet], source: Source = ENTITIES) -> None:
    """After a failed write: remove the index rows it added that the entity does not imply.

    They are harmless (queries re-check entities) but a failed write should leave nothing
    behind. This is best effort: if it fails too, the cleaner removes them.
    """
    if any(added.values()):
        _remove_stale_later(alias, added, source)


class _ConcurrentInsert(Exception):
    pass


def _retry_concurrent_insert(operation: Any) -> Any:
    for _ in range(3):
        try:
            return operation()
        except _ConcurrentInsert:
            continue
    return operation()


def before_save(entity: Entity, using: str) -> None:
    """``pre_save`` (inside the entity's transaction): lock the row and learn its old rows."""
    prepared: PreparedWrite | None = getattr(entity, "_pending_write", None)
    if prepared is None:  # save_base called directly: prepare now
        prepared = prepare(entity)
        entity._pending_write = prepared  # type: ignore[attr-defined]
    current = {} if prepared.skip_lock else lock_current(using, [prepared.entity_id])
    if prepared.entity_id in current:
        if prepared.force_insert:
            raise EntityExists(f"an entity with id {entity.id} already exists")
        added_id, old_body = current[prepared.entity_id]
        entity.added_id = added_id
        entity._state.adding = False
        prepared.old = stored_rows(prepared.entity_id, old_body)
    else:
        entity.added_id = None
        entity._state.adding = True
        prepared.old = set()
    entity.row_updated = timezone.now()
    entity.row_body = prepared.body


def after_save(entity: Entity, using: str) -> None:
    """``post_save`` (the entity row is written, locked, not yet committed): add the new index
    rows, committed before the entity is; once it commits, remove the keys it no longer has."""
    prepared: PreparedWrite | None = getattr(entity, "_pending_write", None)
    if prepared is None:
        return
    new = prepared.rows - prepared.old
    prepared.added |= new
    add_index_rows(_with_entity(new, prepared.entity_id))
    if conf.get().history:
        cells.append_entity_versions(
            using, [(prepared.entity_id, prepared.body)], entity.row_updated
        )
    stale = prepared.old - prepared.rows
    if stale:
        transaction.on_commit(
            partial(_remove_stale_later, using, {prepared.entity_id: stale}),
            using=using,
            robust=True,
        )


def delete(entity: Entity) -> int:
    """Delete one entity (Django's delete, with ``pre_delete``/``post_delete``); 1 or 0."""
    entity_id = bytes(entity.row_id)
    alias = shards.alias_for(entity_id)

    def attempt() -> int:
        with transaction.atomic(using=alias):
            current = lock_current(alias, [entity_id])
            if entity_id not in current:
                return 0
            entity.added_id = current[entity_id][0]
            entity._pending_delete = stored_rows(entity_id, current[entity_id][1])  # type: ignore[attr-defined]
            count, _ = models.Model.delete(entity, using=alias)
            if count and conf.get().history:
                cells.append_entity_versions(alias, [(entity_id, None)], timezone.now())
            return 1 if count else 0

    with shards.write_lock(), shards.errors_named(alias):
        return shards.with_retries(attempt, alias)


def after_delete(entity: Entity, using: str) -> None:
    """``post_delete``: once the deletion commits, remove the entity's index rows."""
    rows: RowSet | None = getattr(entity, "_pending_delete", None)
    if rows is None:  # deleted by other means (e.g. a raw queryset): use what we know
        rows = stored_rows(bytes(entity.row_id), entity.row_body or None)
    entity._pending_delete = None  # type: ignore[attr-defined]
    if rows:
        transaction.on_commit(
            partial(_remove_stale_later, using, {bytes(entity.row_id): rows}),
            using=using,
            robust=True,
        )


# --- batches -------------------------------------------------------------------------------


def put_many(entities: list[Entity], batch_size: int = 500) -> None:
    """Insert or replace many entities, batch by batch per shard, maintaining indexes.

    Every entity is validated before anything is written. A later item with the same id as an
    earlier one wins.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    prepared = [prepare(entity) for entity in entities]
    by_alias: dict[str, dict[bytes, tuple[Entity, PreparedWrite]]] = defaultdict(dict)
    for entity, write in zip(entities, prepared, strict=True):
        by_alias[write.alias][write.entity_id] = (entity, write)
    for alias, items in by_alias.items():
        batch = list(items.values())
        for start in range(0, len(batch), batch_size):
            _put_batch(alias, batch[start : start + batch_size])


def _put_batch(alias: str, batch: list[tuple[Entity, PreparedWrite]]) -> None:
    conn = shards.connection(alias)
    stale: dict[bytes, RowSet] = {}
    added: dict[bytes, RowSet] = defaultdict(set)

    def attempt(lock_all: bool = False) -> None:
        stale.clear()
        now = timezone.now()
        updated_db = conn.ops.adapt_datetimefield_value(now)
        # An id the store generated for this entity cannot exist yet: its INSERT locks it.
        # (After a duplicate-key error, everything is locked and read, to be sure.)
        wanted = [
            w.entity_id for e, w in batch if lock_all or not getattr(e, "_generated_id", False)
        ]
        with transaction.atomic(using=alias):
            current = lock_current(alias, wanted) if wanted else {}
            new_rows = []
            inserts, updates = [], []
            for _entity, write in batch:
                old_added_id, old_body = current.get(write.entity_id, (None, None))
                old = stored_rows(write.entity_id, old_body)
                new = write.rows - old
                added[write.entity_id] |= new
                new_rows.extend(_with_entity(new, write.entity_id))
                gone = old - write.rows
                if gone:
                    stale[write.entity_id] = gone
                if old_added_id is None:
                    inserts.append((write.entity_id, updated_db, write.body))
                else:
                    updates.append((updated_db, write.body, write.entity_id))
            with shards.statement_cursor(conn) as cursor:
                if inserts:
                    cursor.executemany(
                        "INSERT INTO entities (id, updated, body) VALUES (%s, %s, %s)", inserts
                    )
                if updates:
                    cursor.executemany(
                        "UPDATE entities SET updated = %s, body = %s WHERE id = %s", updates
                    )
            if conf.get().history:
                cells.append_entity_versions(
                    alias, [(write.entity_id, write.body) for _e, write in batch], now
                )
            add_index_rows(new_rows)  # committed now, before the entities commit
        for entity, write in batch:
            entity.row_updated = now
            entity.row_body = write.body
            entity._state.adding = False
            entity._state.db = alias
            entity._generated_id = False

    def attempt_or_retry_duplicates() -> None:
        try:
            return shards.with_retries(attempt, alias)
        except IntegrityError:
            pass  # a concurrent creator inserted one of the ids: redo as updates
        for _ in range(2):
            try:
                return shards.with_retries(partial(attempt, lock_all=True), alias)
            except IntegrityError:
                continue
        return shards.with_retries(partial(attempt, lock_all=True), alias)

    with shards.write_lock():
        try:
            with shards.errors_named(alias):
                attempt_or_retry_duplicates()
        except BaseException:
            _undo_added(alias, added)
            raise
    if stale:
        _remove_stale_later(alias, stale)

"""Step 2's statements sent with the receipt and the ``COMMIT`` (docs/design.md#round-trips):
an entity's ``INSERT``, ``UPDATE`` or ``DELETE`` and, with ``history``, its version, handed
to the driver's ``BEGIN`` ... ``COMMIT`` (``carrier``, from :meth:`.protocol.Write.carrier`),
which sends them in the commit's one multi-statement query. The writer needs none of their
answers before the commit: an updated or deleted row is locked already (step 1), and a new
row's ``INSERT`` fails there on a duplicate key (the server runs no statement after it, the
``COMMIT`` neither). A new row that implies index rows is the exception: its ``INSERT`` is
sent in step 2, so that its key is locked before step 3 commits them
(:func:`insert_before_rows`, docs/design.md#rows-under-the-lock)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..tables import cells as cell_table
from ..tables import entities as entity_table
from ..tables import receipts as receipt_table


def save(write: Any, carrier: Any, entity: Any, stamp: Any, history: bool) -> dict[str, Any]:
    """Step 2 of a save of one entity (``write.changes[0]``); returns the write's result. A
    new row's ``added_id`` is set on ``entity`` and in that result once committed."""
    change = write.changes[0]
    if change.found is None:

        def inserted(added_id: int, _rowcount: int, _rows: tuple[Any, ...]) -> None:
            entity.added_id = result["added_id"] = added_id

        if change.rows:
            result = insert_before_rows(write, carrier, change.body, stamp, history, inserted)
        else:
            result = insert(carrier, change.key, change.body, stamp, history, inserted)
        return result
    entity.added_id = change.found.added_id
    update(carrier, [(change.key, change.body)], stamp, history)
    return {"added_id": int(entity.added_id), "created": 0}


def insert(
    carrier: Any,
    key: bytes,
    body: bytes,
    stamp: Any,
    history: bool,
    inserted: Callable[[int, int, tuple[Any, ...]], None],
) -> dict[str, Any]:
    """A new row (``inserted(added_id, rowcount, rows)`` once committed); returns the receipt's
    result, whose ``added_id`` the server fills in (:data:`..tables.receipts.ADDED_ID`)."""
    carrier.defer(entity_table.INSERT, (key, stamp, body), then=inserted)
    carrier.defer_rendered(receipt_table.KEEP_ADDED_ID)
    _versions(carrier, [(key, body)], stamp, history)
    return {"added_id": receipt_table.ADDED_ID, "created": 1}


def insert_before_rows(
    write: Any,
    carrier: Any,
    body: bytes,
    stamp: Any,
    history: bool,
    inserted: Callable[[int, int, tuple[Any, ...]], None],
) -> dict[str, Any]:
    """A new row that implies index rows: its ``INSERT`` is sent now, in step 2, so the key is
    locked before step 3 commits those rows. Every remover re-checks a row under its entity's
    lock (another writer's step 5, a failed write's undo, the cleaner's sweep of a row whose
    entity it does not find): it then waits for this write's outcome. Deferred to the
    ``COMMIT``, the ``INSERT`` left the key unlocked, the sweep found no entity and deleted
    the rows, and the entity committed without them (I2). Its version and the receipt still
    go with the ``COMMIT``."""
    key = write.changes[0].key
    entity_table.insert_now(write.conn, write.tx.opening(), key, stamp, body)

    def answered(_lastrowid: int, _rowcount: int, rows: tuple[Any, ...]) -> None:
        inserted(int(rows[0][0]), 1, ())

    carrier.defer(entity_table.KEPT_ADDED_ID, [], then=answered)
    _versions(carrier, [(key, body)], stamp, history)
    return {"added_id": receipt_table.ADDED_ID, "created": 1}


def update(carrier: Any, rows: Sequence[tuple[bytes, bytes]], stamp: Any, history: bool) -> None:
    """Locked rows' new bodies (``(id, body)``)."""
    for key, body in rows:
        carrier.defer(entity_table.UPDATE, (stamp, body, key))
    _versions(carrier, rows, stamp, history)


def delete(carrier: Any, key: bytes, stamp: Any, history: bool) -> None:
    """A locked row gone."""
    carrier.defer(entity_table.DELETE, (key,))
    _versions(carrier, [(key, None)], stamp, history)


def _versions(
    carrier: Any, bodies: Sequence[tuple[bytes, bytes | None]], stamp: Any, history: bool
) -> None:
    if history:
        for sql, params in cell_table.entity_version_statements(bodies, stamp):
            carrier.defer(sql, params)

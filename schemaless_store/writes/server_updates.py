"""Partial updates the server applies (docs/design.md#partial-updates-on-the-server):
``save(update_fields=...)`` and ``filter(id=...).update(...)`` of properties no index covers,
on a MariaDB shard whose bodies are JSON (``SCHEMALESS["CODEC"]``: ``JsonCodec``).

Such an update needs no index row and no stored value in Python: its ``UPDATE`` sets the new
values in the body with ``JSON_SET`` (each value encoded here exactly as the codec encodes
it, :func:`..values.jsonbody.encode_value`), an ``F("n") + 1`` of an integer adds on the
server, and the statement travels with the receipt and the ``COMMIT``: one round trip, no
read (the protocol's step 1 skips a :attr:`~.protocol.Change.blind` change). The statement's
``WHERE`` checks what the read would have: a JSON body (not a MessagePack one, e.g. before
``rewritebodies``), valid, short enough for the size limit, each incremented property an
integer that stays in JSON's safe range. A row it does not change (missing, another format,
any check failed) is 0 in the receipt's ``added_id`` and in the answer: the caller then
takes the read-under-lock route (:mod:`.entity_writes`), which raises what it raises.

Everything else the protocol does stays: the fence (step 0), the receipt (a lost answer's
retry reads it: a landed update is not applied again, one that changed nothing runs the other
route), the cache's invalidation, the history version (copied from the row by ``INSERT ...
SELECT``, only when the row changed). SQLite keeps the read-under-lock route (its writes take
no network round trip).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from django.db.models import F, Value
from django.db.models.expressions import CombinedExpression
from django.utils import timezone

from ..config import conf
from ..config.indexes import KIND_PROPERTY
from ..exceptions import InvalidQuery, UnsupportedValue
from ..sql import dialects
from ..sql.values import db_datetime
from ..tables import cells as cell_table
from ..tables import entities as entity_table
from ..tables import json_updates
from ..tables import receipts as receipt_table
from ..tables.lifecycle import maintained_indexes
from ..topology import bucket_map, shards
from ..values import jsonbody
from ..values.codec import MAX_NESTING, JsonCodec
from .protocol import Change, Write, run

ABSENT: Any = object()  # a property to remove (a name the instance lacks)

# Names the statement spells as a JSON path, ``$.name``, with no quoting to get wrong.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
# What a changed or added property can add to a compact body beyond its name and value: the
# quotes around the name, the colon, the comma.
_PER_PROPERTY = 4
# The longest text of an integer within JSON's safe range.
_INT_TEXT = len(str(-jsonbody.SAFE_INT))

_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
}


@dataclass(frozen=True)
class Plan:
    """How the server applies a partial update (:func:`plan`)."""

    changes: json_updates.JsonChanges


def plan(values: Mapping[str, Any]) -> Plan | None:
    """The server's way to set ``values`` (:data:`ABSENT`: remove), or None when it has none:
    the codec is not JSON, a name is covered by an index or is not a plain name, a value is an
    expression other than an integer ``F()`` increment of its own property, or does not
    encode (the other route raises what it raises)."""
    settings = conf.get()
    if not isinstance(settings.codec, JsonCodec):
        return None
    covered, kinds = covered_names(values)
    sets: list[tuple[str, str]] = []
    increments: list[tuple[str, int]] = []
    removals: list[str] = []
    grows = 0
    for name, value in values.items():
        if name in covered or not _NAME.match(name):
            return None
        path = f"$.{name}"
        if value is ABSENT:
            removals.append(path)
            continue
        if hasattr(value, "resolve_expression"):
            delta = increment(name, value)
            if delta is None:
                return None
            increments.append((path, delta))
            grows += len(name) + _PER_PROPERTY + _INT_TEXT
            continue
        try:
            text = jsonbody.encode_value(value, MAX_NESTING)
        except UnsupportedValue:
            return None
        sets.append((path, text))
        grows += len(name) + _PER_PROPERTY + len(text.encode())
    most = settings.max_body_bytes - grows
    if most <= 1:
        return None
    return Plan(json_updates.JsonChanges(sets, increments, removals, most, sorted(kinds)))


def covered_names(values: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """``(names, kinds)``: the properties some maintained index of every entity reads
    (changing one may change index rows), and the kinds whose own indexes read one of
    ``values``' names (the statement leaves an entity of those kinds to the other route; a
    kind's index reads the kind property too, which is then covered)."""
    names: set[str] = set()
    kinds: set[str] = set()
    for index in maintained_indexes():
        if index.column is not None:
            continue
        if index.kind is None:
            names |= index.property_set
            continue
        names.add(KIND_PROPERTY)
        if index.property_set & set(values):
            kinds.add(index.kind)
    return names, kinds


def increment(name: str, value: Any) -> int | None:
    """The ``delta`` of ``F(name) + delta`` (``delta + F(name)``, ``F(name) - delta``,
    ``F(name)``), an ``int`` within JSON's safe range; None for any other expression."""
    if isinstance(value, F):
        return 0 if value.name == name else None
    if not isinstance(value, CombinedExpression) or value.connector not in ("+", "-"):
        return None
    lhs, rhs = value.lhs, value.rhs
    if value.connector == "+" and isinstance(lhs, Value):
        lhs, rhs = rhs, lhs
    if not (isinstance(lhs, F) and lhs.name == name and isinstance(rhs, Value)):
        return None
    delta = rhs.value
    if type(delta) is not int or abs(delta) > jsonbody.SAFE_INT:
        return None
    return delta if value.connector == "+" else -delta


def resolve(value: Any, stored: Mapping[str, Any]) -> Any:
    """``value`` with its ``F()`` read from ``stored`` (the properties read under the lock):
    ``F()``, ``Value()`` and ``+ - * /`` of them; a plain value as it is."""
    if not hasattr(value, "resolve_expression"):
        return value
    if isinstance(value, F):
        if value.name not in stored:
            raise InvalidQuery(f"F({value.name!r}) names a property the entity lacks")
        return stored[value.name]
    if isinstance(value, Value):
        return value.value
    if isinstance(value, CombinedExpression) and value.connector in _OPERATORS:
        left, right = resolve(value.lhs, stored), resolve(value.rhs, stored)
        try:
            return _OPERATORS[value.connector](left, right)
        except TypeError as exc:
            raise InvalidQuery(f"cannot apply {value!r}: {exc}") from exc
    raise InvalidQuery(
        f"{value!r} is an expression the store cannot apply: update() applies F() with "
        "+ - * /; else compute the value in Entity.objects.modify(id, fn)"
    )


def applies_here(key: bytes) -> bool:
    """Whether the shard of ``key`` can apply a partial update itself (MariaDB)."""
    return dialects.of(shards.connection(bucket_map.alias_for(key))).driver_route


def save_fields(entity: Any, only: frozenset[str]) -> bool:
    """``save(update_fields=only)`` of ``entity`` applied by the server in one round trip,
    where it can: whether it was. No signal receiver may see the row before the
    commit (the caller checked), and the write checks no condition (those take the
    read-under-lock route)."""
    key = bytes(entity.row_id)
    if not applies_here(key):
        return False
    mine = entity.body_properties()
    how = plan({name: mine.get(name, ABSENT) for name in only})
    if how is None:
        return False
    now = timezone.now()
    applied = apply(key, how, now, want_body=True)
    if not applied.added_id:
        return False  # not a JSON body (or missing): the read-under-lock route decides
    entity.added_id = applied.added_id
    entity.row_updated = now
    # After a lost answer only the receipt is known, not the body the server built: an
    # empty one, which no stored body equals, so a later if_unchanged save conflicts
    # rather than overwrite a change it never saw.
    entity.row_body = b"" if applied.body is None else applied.body
    entity._state.adding = False
    entity._state.db = applied.alias
    entity.has_generated_id = False
    return True


class _NotApplied(Exception):
    """The row was not changed (sent now, not with the ``COMMIT``): the transaction rolls
    back and the caller takes the other route."""


@dataclass
class Applied:
    """What the server answered: the row's ``added_id`` (0: not changed), the shard, and,
    when asked, its new body (None after a lost answer: only the receipt is known)."""

    added_id: int = 0
    alias: str = ""
    body: bytes | None = None


def apply(key: bytes, how: Plan, now: datetime, *, want_body: bool) -> Applied:
    """Run the update on the shard of ``key`` (``updated``: ``now``); ``added_id`` 0 when
    the row was not changed (the caller takes the read-under-lock route)."""
    change = Change(key=key, rows=set(), blind=True)
    write = Write(bucket_map.alias_for(key), [change], defers=True)
    applied = Applied()
    try:
        run(write, partial(_store, how=how, applied=applied, now=now, want_body=want_body))
    except _NotApplied:
        return Applied()
    if write.recalled:  # the answer was lost; the receipt says whether the row changed
        return Applied(int(write.result.get("added_id", 0)), write.alias)
    applied.alias = write.alias
    return applied


def _store(
    write: Write, how: Plan, applied: Applied, now: datetime, want_body: bool
) -> dict[str, Any]:
    """Step 2: the update, the added_id it kept, the history version, the answer."""
    key, conn = write.changes[0].key, write.conn
    stamp = db_datetime(conn, now)
    statements = [
        json_updates.json_update(key, stamp, how.changes, jsonbody.SAFE_INT),
        (json_updates.KEEP_APPLIED, [key]),
    ]
    if conf.get().history:
        statements += cell_table.entity_version_from_row(key, stamp)
    answer = (json_updates.APPLIED_BODY, [key]) if want_body else (entity_table.KEPT_ADDED_ID, [])
    carrier = write.carrier(sum(len(str(p)) for _sql, params in statements for p in params))
    if carrier is not None:  # the driver's route: with the receipt and the COMMIT

        def answered(_lastrowid: int, _rowcount: int, rows: tuple[Any, ...]) -> None:
            if rows and rows[0][0]:
                applied.added_id = int(rows[0][0])
                applied.body = bytes(rows[0][1]) if want_body else None

        for sql, params in statements:
            carrier.defer(sql, params)
        carrier.defer(*answer, then=answered)
        return {"added_id": receipt_table.ADDED_ID, "created": 0}
    # atomic() (a signal-free write on Galera, a caller's transaction): sent now, in order.
    with shards.statement_cursor(conn) as cursor:
        sql, params = statements[0]
        cursor.execute(sql, params)
        if cursor.rowcount < 1:
            raise _NotApplied()
        for sql, params in statements[1:]:
            cursor.execute(sql, params)
        cursor.execute(*answer)
        row = cursor.fetchone()
    applied.added_id = int(row[0])
    applied.body = bytes(row[1]) if want_body else None
    return {"added_id": applied.added_id, "created": 0}

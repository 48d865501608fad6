"""The statements of a partial update the server applies to a JSON body, with no read in
Python (docs/design.md#partial-updates-on-the-server; :mod:`..writes.server_updates` runs
them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..config.indexes import KIND_PROPERTY

# A JSON body's text where the statement has checked its format byte already.
_JSON_TEXT = "CONVERT(SUBSTRING(body, 2) USING utf8mb4)"
# After a partial update's UPDATE (json_update): the row's added_id if it changed, else 0; the
# receipt's ADDED_ID (tables/receipts.py) and the statements after it read it.
KEEP_APPLIED = (
    "SET @schemaless_added_id = IF(ROW_COUNT() > 0, "
    "(SELECT added_id FROM entities WHERE id = %s), 0)"
)
APPLIED_BODY = "SELECT @schemaless_added_id, body FROM entities WHERE id = %s"


class JsonChanges(NamedTuple):
    """What a partial update sets in a JSON body (docs/design.md#partial-updates-on-the-server):
    ``sets``: ``(path, JSON text)``, the text encoded as the body's own (values/jsonbody.py);
    ``increments``: ``(path, delta)`` of an integer the body holds; ``removals``: paths.
    ``most``: the longest stored body the new one stays within the size limit from;
    ``not_kinds``: kinds whose indexes read a property changed (an entity of one is not
    changed here). The paths are ``$.<name>`` of names the caller checked (letters, digits,
    ``_``); paths and kinds are sent as literals."""

    sets: Sequence[tuple[str, str]]
    increments: Sequence[tuple[str, int]]
    removals: Sequence[str]
    most: int
    not_kinds: Sequence[str] = ()


def json_update(key: bytes, updated: Any, changes: JsonChanges, safe: int) -> tuple[str, list[Any]]:
    """The ``UPDATE`` that applies ``changes`` to a JSON body on the server, with no read
    before it. It changes the row only if its body is JSON (format byte ``0x03``), valid,
    short enough, not of ``not_kinds``, and each incremented property an integer that stays
    within ``±safe``: else it matches nothing and the caller takes the read-under-lock route
    (the affected-row count, or :data:`KEEP_APPLIED`, tells). ``JSON_COMPACT`` keeps the
    body compact, as the codec writes it."""
    doc = _JSON_TEXT
    expression = doc
    params: list[Any] = []
    if changes.sets or changes.increments:
        parts = []
        for path, text in changes.sets:
            parts.append("%s, JSON_EXTRACT(%s, '$')")
            params += [path, text]
        for path, delta in changes.increments:
            parts.append(f"%s, CAST(JSON_VALUE({doc}, %s) AS SIGNED) + %s")
            params += [path, path, delta]
        expression = f"JSON_SET({doc}, {', '.join(parts)})"
    if changes.removals:
        expression = f"JSON_REMOVE({expression}, {', '.join(['%s'] * len(changes.removals))})"
        params += list(changes.removals)
    where = f"id = %s AND LEFT(body, 1) = x'03' AND LENGTH(body) <= %s AND JSON_VALID({doc})"
    where_params: list[Any] = [key, changes.most]
    if changes.not_kinds:
        marks = ", ".join(["%s"] * len(changes.not_kinds))
        kind = f"JSON_VALUE({doc}, '$.{KIND_PROPERTY}')"
        where += f" AND ({kind} IS NULL OR {kind} NOT IN ({marks}))"
        where_params += list(changes.not_kinds)
    for path, delta in changes.increments:
        where += (
            f" AND JSON_TYPE(JSON_EXTRACT({doc}, %s)) = 'INTEGER'"
            f" AND CAST(JSON_VALUE({doc}, %s) AS SIGNED) + %s BETWEEN %s AND %s"
        )
        where_params += [path, path, delta, -safe, safe]
    sql = (
        f"UPDATE entities SET updated = %s, body = CONCAT(x'03', JSON_COMPACT({expression})) "
        f"WHERE {where}"
    )
    return sql, [updated, *params, *where_params]

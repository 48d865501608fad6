"""The export format: JSON Lines, one JSON object per line, readable by ``jq`` and any language.

::

    {"export": {"format": 1, "started": "2026-01-02T03:04:05.123456+00:00",
                "shards": ["shard_0", "shard_1"], "since": null, "cells": false}}
    {"id": "5f0c...-...", "updated": "2026-01-01T10:00:00.5+00:00", "properties": {...}}
    ...
    {"row_key": "5f0c...", "column": "users", "ref_key": 2,
     "created_at": "2026-01-01T10:00:00+00:00", "properties": {...}}     (with --cells)
    {"end": {"entities": 1000000, "cells": 0}}

- The first line (``export``) says what the file holds; the last (``end``) is written only
  when the export finished, so a truncated file is recognised.
- An *entity line* has the entity's ``id`` (a UUID string), ``updated`` (when its row was last
  written, ISO 8601 with its UTC offset) and its ``properties`` in the admin's reversible JSON
  form (:mod:`schemaless_store.values.jsonview`: ``{"$uuid": ...}``, ``{"$bytes": ...}``,
  ``{"$datetime": ...}``, ``{"$float": "nan"}``, ``{"$dict": [...]}``). Properties are an
  object of their own because a property may be called ``updated``.
- A *cell line* is one version of one cell column (``_entity`` is entity history);
  ``properties`` is null for a version that records a deletion.

Only an entity line's ``id`` and ``properties`` are required on import (``updated`` is
informational), so files written by other tools import too.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from ..exceptions import SchemalessError
from ..values.jsonview import JSONViewError, from_json, properties_to_json

FORMAT = 1
ENTITY_KEYS = frozenset(("id", "updated", "properties"))
CELL_KEYS = frozenset(("row_key", "column", "ref_key", "created_at", "properties"))
_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(", ", ": ")).encode
# Values that stand for themselves in the JSON form (no tag to read).
_PLAIN = frozenset((str, int, float, bool, type(None)))


class BadLine(SchemalessError, ValueError):
    """A line that does not stand for an entity, a cell, or the export's first or last line."""


@dataclass(frozen=True)
class Header:
    """The export's first line."""

    started: str
    shards: list[str]
    since: str | None
    cells: bool
    format: int = FORMAT


@dataclass(frozen=True)
class End:
    """The export's last line: what it wrote."""

    entities: int
    cells: int


@dataclass(slots=True)
class EntityLine:
    key: bytes  # the entity's id, 16 bytes
    properties: dict[str, Any]

    @property
    def id(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.key)


@dataclass(slots=True)
class CellLine:
    row_key: uuid.UUID
    column: str
    ref_key: int
    created_at: dt.datetime
    properties: dict[str, Any] | None


Line = Header | End | EntityLine | CellLine


# --- writing -----------------------------------------------------------------------------------


def header(started: dt.datetime, shards: list[str], since: dt.datetime | None, cells: bool) -> str:
    info = {
        "format": FORMAT,
        "started": started.isoformat(),
        "shards": shards,
        "since": None if since is None else since.isoformat(),
        "cells": cells,
    }
    return _dumps({"export": info}) + "\n"


def end(entities: int, cells: int) -> str:
    return _dumps({"end": {"entities": entities, "cells": cells}}) + "\n"


def entity(key: bytes, updated: dt.datetime, properties: dict[str, Any]) -> str:
    """An entity line (``properties`` without ``id``)."""
    return (
        _dumps(
            {
                "id": str(uuid.UUID(bytes=key)),
                "updated": updated.isoformat(),
                "properties": properties_to_json(properties),
            }
        )
        + "\n"
    )


def cell(
    key: bytes, column: str, ref_key: int, created: dt.datetime, properties: dict[str, Any] | None
) -> str:
    body = None if properties is None else properties_to_json(properties)
    return (
        _dumps(
            {
                "row_key": str(uuid.UUID(bytes=key)),
                "column": column,
                "ref_key": ref_key,
                "created_at": created.isoformat(),
                "properties": body,
            }
        )
        + "\n"
    )


# --- reading -----------------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise BadLine(f'invalid JSON: {name} is not JSON; write {{"$float": "{name.lower()}"}}')


_decoder = json.JSONDecoder(parse_constant=_no_constant)


def _parse(text: str) -> Any:
    """The JSON value of one line. ``raw_decode`` first (half the cost of ``loads``, which
    also skips leading whitespace with a regular expression); ``loads`` again for whatever
    it refuses, to say why or to read a line with leading whitespace."""
    try:
        data, end = _decoder.raw_decode(text)
        if end == len(text) or text[end:].isspace():
            return data
    except (ValueError, RecursionError):
        pass
    try:
        return _decoder.decode(text)
    except BadLine:
        raise
    except json.JSONDecodeError as exc:
        # json's messages read "Invalid control character at" or "Expecting value".
        what = exc.msg.removesuffix(" at")
        raise BadLine(
            f"invalid JSON: {what[:1].lower()}{what[1:]} at character {exc.pos + 1}"
        ) from None
    except (ValueError, RecursionError) as exc:  # a huge integer, or nesting too deep
        raise BadLine(f"invalid JSON: {exc}") from None


def read(text: str) -> Line:
    """What one line stands for; :class:`BadLine` saying why if nothing.

    A key repeated in one object keeps its last value, as most JSON readers do (the admin's
    editor refuses it; a file is read at the speed of ``json``'s C decoder instead)."""
    data = _parse(text)
    if type(data) is not dict:
        raise BadLine(f"a line is a JSON object, not {type(data).__name__}")
    if "properties" in data and "id" in data:
        return _entity(data)
    if "row_key" in data:
        return _cell(data)
    if set(data) == {"export"}:
        return _header(data["export"])
    if set(data) == {"end"}:
        return _end(data["end"])
    if "id" in data:
        raise BadLine('an entity line needs "properties" (an object), besides "id"')
    raise BadLine(
        'not an entity line (keys "id", "properties" and optionally "updated"), a cell line '
        '("row_key", ...), nor an export\'s first or last line; keys found: '
        + ", ".join(sorted(data)[:5])
    )


def _entity(data: dict[str, Any]) -> EntityLine:
    if not ENTITY_KEYS.issuperset(data):
        unknown = sorted(set(data) - ENTITY_KEYS)[0]
        raise BadLine(f"unknown key {unknown!r}; an entity line has id, updated and properties")
    return EntityLine(_key(data["id"], "id"), _properties(data["properties"]))


def _cell(data: dict[str, Any]) -> CellLine:
    missing = CELL_KEYS - set(data)
    if missing:
        raise BadLine(f"a cell line needs {', '.join(sorted(missing))}")
    unknown = set(data) - CELL_KEYS
    if unknown:
        raise BadLine(f"unknown key {sorted(unknown)[0]!r} in a cell line")
    column, ref_key = data["column"], data["ref_key"]
    if type(column) is not str or not column:
        raise BadLine(f"column is a non-empty string, not {column!r}")
    if type(ref_key) is not int or ref_key < 1:
        raise BadLine(f"ref_key is a whole number of at least 1, not {ref_key!r}")
    properties = None if data["properties"] is None else _properties(data["properties"])
    return CellLine(
        _uuid(data["row_key"], "row_key"),
        column,
        ref_key,
        _datetime(data["created_at"], "created_at"),
        properties,
    )


def _header(info: Any) -> Header:
    if type(info) is not dict or info.get("format") != FORMAT:
        found = info.get("format") if type(info) is dict else info
        raise BadLine(f"an export of format {found!r}; this version reads format {FORMAT}")
    return Header(
        started=str(info.get("started", "")),
        shards=list(info.get("shards") or []),
        since=info.get("since"),
        cells=bool(info.get("cells")),
    )


def _end(info: Any) -> End:
    if type(info) is not dict:
        raise BadLine("the export's last line holds an object of counts")
    return End(entities=int(info.get("entities", 0)), cells=int(info.get("cells", 0)))


def _properties(data: Any) -> dict[str, Any]:
    if type(data) is not dict:
        raise BadLine(f"properties is a JSON object, not {type(data).__name__}")
    if "id" in data:
        raise BadLine('"id" cannot be a property: it is the entity\'s id (the line\'s own "id")')
    plain = _PLAIN
    try:
        return {
            name: value if type(value) in plain else from_json(value, name)
            for name, value in data.items()
        }
    except JSONViewError as exc:
        raise BadLine(f"properties: {exc}") from None
    except RecursionError:
        raise BadLine("properties: nested too deeply") from None


def _key(value: Any, name: str) -> bytes:
    """The 16 bytes of a UUID written as 36 characters with dashes, or 32 without."""
    if type(value) is str and len(value) in (32, 36):
        try:
            key = bytes.fromhex(value.replace("-", ""))
        except ValueError:
            key = b""
        if len(key) == 16:
            return key
    raise BadLine(f"{name} is a UUID string, not {json.dumps(value)[:60]}")


def _uuid(value: Any, name: str) -> uuid.UUID:
    if type(value) is str:
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise BadLine(f"{name} is a UUID string, not {json.dumps(value)[:60]}")


def _datetime(value: Any, name: str) -> dt.datetime:
    try:
        parsed = dt.datetime.fromisoformat(value) if type(value) is str else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.utcoffset() is None:
        raise BadLine(f"{name} is an ISO 8601 date and time with a UTC offset, not {value!r}")
    return parsed

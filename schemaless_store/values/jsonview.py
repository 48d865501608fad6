"""A reversible JSON view of property bags: what the admin shows, and what its edit form reads.

JSON has no bytes, UUIDs, datetimes, NaN or non-string keys, so those values are written as an
object with a single ``$``-key (a *tagged* value)::

    b"\\x00\\xff"                       {"$bytes": "00ff"}          (hex)
    uuid.UUID("1234...")              {"$uuid": "12345678-1234-5678-1234-567812345678"}
    datetime(2009, 2, 26, tzinfo=UTC) {"$datetime": "2009-02-26T00:00:00+00:00"}
    float("nan"), ±inf                {"$float": "nan"} / {"$float": "inf"} / {"$float": "-inf"}
    {1: "a"} (a non-string key)       {"$dict": [[1, "a"]]}

Everything else (str, int, finite float, bool, None, list, dict with string keys) is plain JSON.
A dict that would itself look like a tagged value (one key starting with ``$``) is written in the
``$dict`` form, so :func:`loads` of :func:`dumps` gives back exactly the same values, of the same
types (``1`` stays an int, ``1.0`` a float). The top level is a property bag: its keys are
property names and are never read as tags.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from typing import Any

from ..exceptions import SchemalessError

TAGS = ("$bytes", "$uuid", "$datetime", "$float", "$dict")


class JSONViewError(SchemalessError, ValueError):
    """The text is not JSON, or a value in it has no meaning in a property bag."""


# --- values -> JSON ---------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """The JSON-able form of one property value (see the module docs)."""
    kind = type(value)
    if value is None or kind in (str, bool, int):
        return value
    if kind is float:
        if math.isnan(value):
            return {"$float": "nan"}
        if math.isinf(value):
            return {"$float": "inf" if value > 0 else "-inf"}
        return value
    if kind is list:
        return [to_json(item) for item in value]
    if kind is dict:
        plain = all(type(key) is str for key in value) and not _looks_tagged(value)
        if plain:
            return {key: to_json(item) for key, item in value.items()}
        return {"$dict": [[to_json(key), to_json(item)] for key, item in value.items()]}
    if kind is bytes:
        return {"$bytes": value.hex()}
    if kind is uuid.UUID:
        return {"$uuid": str(value)}
    if kind is dt.datetime:
        if value.utcoffset() is None:
            raise JSONViewError(f"naive datetime {value!r} has no JSON form: it needs a timezone")
        return {"$datetime": value.isoformat()}
    raise JSONViewError(f"a {kind.__name__} has no JSON form in a property bag")


def _looks_tagged(value: dict[str, Any]) -> bool:
    return len(value) == 1 and next(iter(value)).startswith("$")


def properties_to_json(properties: dict[str, Any]) -> dict[str, Any]:
    return {name: to_json(value) for name, value in properties.items()}


def dumps(properties: dict[str, Any], *, indent: int | None = 2) -> str:
    """Pretty JSON for a property bag (keys in stored order, non-ASCII text kept readable)."""
    return json.dumps(
        properties_to_json(properties), indent=indent, ensure_ascii=False, allow_nan=False
    )


def dumps_value(value: Any) -> str:
    """One value as compact JSON (for previews and index rows)."""
    return json.dumps(to_json(value), ensure_ascii=False, allow_nan=False)


# --- JSON -> values ---------------------------------------------------------------------------


def from_json(data: Any, path: str = "value") -> Any:
    """The property value that a JSON-decoded ``data`` stands for; :class:`JSONViewError` if none.

    ``path`` names the place in the document, for error messages.
    """
    if data is None or type(data) in (str, bool, int, float):
        return data
    if type(data) is list:
        return [from_json(item, f"{path}[{n}]") for n, item in enumerate(data)]
    if type(data) is dict:
        if len(data) == 1:
            (key,) = data
            if key.startswith("$"):
                return _from_tagged(key, data[key], path)
        return {key: from_json(item, f"{path}.{key}") for key, item in data.items()}
    raise JSONViewError(f"{path}: unexpected {type(data).__name__}")  # not from json.loads


def _from_tagged(tag: str, payload: Any, path: str) -> Any:
    where = f"{path}: {{{json.dumps(tag)}: ...}}"
    if tag not in TAGS:
        raise JSONViewError(
            f"{where}: unknown tag; tagged values are {', '.join(TAGS)}. A dict whose only key "
            'starts with "$" is written {"$dict": [["$key", value]]}'
        )
    if tag == "$dict":
        if type(payload) is not list:
            raise JSONViewError(f"{where} takes a list of [key, value] pairs")
        result: dict[Any, Any] = {}
        for n, pair in enumerate(payload):
            if type(pair) is not list or len(pair) != 2:
                raise JSONViewError(f"{where}: item {n} is not a [key, value] pair")
            key = from_json(pair[0], f"{path}[{n}].key")
            if isinstance(key, list | dict):
                raise JSONViewError(f"{where}: key {n} is a {type(key).__name__}, not a scalar")
            if key in result:
                raise JSONViewError(f"{where}: key {pair[0]!r} appears twice")
            result[key] = from_json(pair[1], f"{path}[{n}].value")
        return result
    if type(payload) is not str:
        raise JSONViewError(f"{where} takes a string, not {_json_type(payload)}")
    if tag == "$bytes":
        try:
            return bytes.fromhex(payload)
        except ValueError:
            raise JSONViewError(f"{where}: {payload!r} is not hexadecimal") from None
    if tag == "$uuid":
        try:
            return uuid.UUID(payload)
        except ValueError:
            raise JSONViewError(f"{where}: {payload!r} is not a UUID") from None
    if tag == "$datetime":
        return _datetime(payload, where)
    if tag == "$float":
        special = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
        if payload.lower() not in special:
            raise JSONViewError(f'{where} is one of "nan", "inf", "-inf"; use a number')
        return special[payload.lower()]
    raise AssertionError(f"unhandled tag {tag}")


def _datetime(text: str, where: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise JSONViewError(f"{where}: {text!r} is not an ISO 8601 date and time") from None
    offset = value.utcoffset()
    if offset is None:
        raise JSONViewError(f"{where}: {text!r} needs a UTC offset (e.g. +00:00)")
    if offset.microseconds:
        # The body stores the offset in whole seconds: refuse rather than change the value.
        raise JSONViewError(f"{where}: a UTC offset with fractions of a second cannot be stored")
    return value


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else "null"
    )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise JSONViewError(f"key {key!r} appears twice in one object")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise JSONViewError(f'{name} is not JSON; write {{"$float": "{name.lower()}"}}')


def parse(text: str) -> Any:
    """``json.loads`` that refuses duplicate keys and the non-JSON NaN/Infinity literals."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except JSONViewError:
        raise
    except json.JSONDecodeError as exc:
        message = f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        raise JSONViewError(message) from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise JSONViewError(f"invalid JSON: {exc}") from None
    except RecursionError:
        raise JSONViewError("invalid JSON: nested too deeply") from None


def loads(text: str) -> dict[str, Any]:
    """The property bag that ``text`` (a JSON object of properties) stands for."""
    data = parse(text)
    if type(data) is not dict:
        raise JSONViewError(f"the body is a JSON object of properties, not {_json_type(data)}")
    return {name: from_json(value, name) for name, value in data.items()}

"""The JSON body: a property bag as a UTF-8 JSON object that MariaDB's JSON functions read.

A body in this format is the format byte ``0x03`` (:data:`FORMAT_JSON`) followed by compact
JSON text, so the server reads it as the text after that byte, e.g.
``JSON_VALUE(CONVERT(SUBSTRING(body, 2) USING utf8mb4), '$.user_id')`` (``JSON_BODY`` in
``tables/entities.py``; docs/design.md, "Bodies the server reads").

A value of a type JSON has is stored as itself: ``str``, ``bool``, ``None``, ``int`` within
JSON's safe range (:data:`SAFE_INT`, the integers every JSON reader holds exactly), finite
``float`` (written as Python's ``repr``, so ``1.0`` keeps its ``.0`` and reads back a float),
lists, and dicts with string keys. The others are an object with a single ``$``-key, a *tagged*
value (the admin's JSON view, :mod:`.jsonview`, uses the same shapes except for bytes)::

    b"\\x00\\xff"                       {"$base64": "AP8="}
    uuid.UUID("1234...")              {"$uuid": "12345678-1234-5678-1234-567812345678"}
    datetime(2009, 2, 26, 1, tzinfo=+01:00)
                                      {"$datetime": "2009-02-26T01:00:00.000000+01:00"}
    float("nan"), ±inf                {"$float": "nan"} / {"$float": "inf"} / {"$float": "-inf"}
    2**60 (beyond ±(2**53 - 1))       {"$int": "1152921504606846976"}
    {1: "a"}, {"$x": 1}               {"$dict": [[1, "a"]]}, {"$dict": [["$x", 1]]}

A datetime is its local wall time, always with six digits of microseconds (so the text has a
fixed width), then its UTC offset (``+HH:MM``, or ``+HH:MM:SS``). A dict whose keys are not all
strings, or that would itself look tagged (exactly one key, starting with ``$``), is a list of
``[key, value]`` pairs. The top level is the property bag: its keys are property names, never
tags. Everything the MessagePack formats store is stored, and everything they refuse is refused
with :class:`UnsupportedValue`, so the two formats hold the same values.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

from ..exceptions import CorruptBody, UnsupportedValue

# Never reuse a format byte (values/codec.py has the others).
FORMAT_JSON = 0x03

# The integers every JSON reader (and MariaDB's arithmetic, which goes through a double) holds
# exactly: Number.MAX_SAFE_INTEGER. Larger ones are tagged as decimal text.
SAFE_INT = 2**53 - 1
# The integers the store holds at all, in every format (MessagePack's range).
INT_MIN, INT_MAX = -(2**63), 2**64 - 1

TAGS = ("$base64", "$uuid", "$datetime", "$float", "$int", "$dict")
_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_CONTAINERS = (dict, list)

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, check_circular=False, separators=(",", ":")
)


def _no_constant(name: str) -> Any:
    raise CorruptBody(f"JSON body holds {name}, which no writer of the format writes")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


# --- values -> JSON ---------------------------------------------------------------------------


def encode_json(properties: Mapping[str, Any], max_nesting: int) -> bytes:
    """The JSON text of a property bag, as UTF-8 (without the format byte); raises
    :class:`UnsupportedValue` for a value no format stores, or for lists and dicts nested more
    than ``max_nesting`` deep."""
    if type(properties) is not dict:
        raise UnsupportedValue(f"a body is a dict of properties, not {type(properties).__name__}")
    out = {}
    for name, value in properties.items():
        if type(name) is not str:
            raise UnsupportedValue(f"property names are strings, not {type(name).__name__}")
        out[name] = value if type(value) is str else _to_json(value, 1, max_nesting)
    try:
        return _ENCODER.encode(out).encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: MessagePack refuses it too
        raise UnsupportedValue(f"cannot store this string: {exc}") from exc


def encode_value(value: Any, max_nesting: int) -> str:
    """The JSON text of one property's value as :func:`encode_json` writes it in a body (its
    tags included): what a partial update the server applies sets (``JSON_SET``)."""
    text = _ENCODER.encode(_to_json(value, 1, max_nesting))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate, as encode_json refuses it
        raise UnsupportedValue(f"cannot store this string: {exc}") from exc
    return text


def _to_json(value: Any, level: int, max_nesting: int) -> Any:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        if -SAFE_INT <= value <= SAFE_INT:
            return value
        if not INT_MIN <= value <= INT_MAX:
            raise UnsupportedValue(
                f"cannot store integer {value}: outside the range -2**63 to 2**64-1"
            )
        return {"$int": str(value)}
    if kind is float:
        if math.isfinite(value):
            return value
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if kind is list or kind is dict:
        if level > max_nesting:
            raise UnsupportedValue(
                f"lists and dicts nest more than {max_nesting} levels deep "
                "(the limit is schemaless_store.values.codec.MAX_NESTING)"
            )
        if kind is list:
            return [_to_json(item, level + 1, max_nesting) for item in value]
        if all(type(key) is str for key in value) and not _looks_tagged(value):
            return {key: _to_json(item, level + 1, max_nesting) for key, item in value.items()}
        return {
            "$dict": [
                [_key_to_json(key), _to_json(item, level + 1, max_nesting)]
                for key, item in value.items()
            ]
        }
    if kind is bytes:
        return {"$base64": base64.b64encode(value).decode("ascii")}
    if kind is uuid.UUID:
        return {"$uuid": str(value)}
    if kind is dt.datetime:
        return {"$datetime": _datetime_text(value)}
    if kind in (bytearray, memoryview):
        raise UnsupportedValue(f"cannot store a value of type {kind.__name__} (use bytes)")
    hint = " (use a list)" if isinstance(value, tuple | set | frozenset) else ""
    raise UnsupportedValue(f"cannot store a value of type {kind.__name__}{hint}")


def _key_to_json(key: Any) -> Any:
    # Keys are hashable, so never lists or dicts; a tuple or frozenset key is refused.
    return _to_json(key, 0, 0)


def _looks_tagged(value: dict[str, Any]) -> bool:
    return len(value) == 1 and next(iter(value)).startswith("$")


def _datetime_text(value: dt.datetime) -> str:
    offset = value.utcoffset()
    if offset is None:
        raise UnsupportedValue(
            f"naive datetime {value!r}: give it a timezone (datetime.UTC or zoneinfo)"
        )
    if offset.microseconds:
        raise UnsupportedValue(
            f"datetime {value!r}: its UTC offset is not a whole number of seconds"
        )
    # The wall time and the offset, with the tzinfo's rules (a zoneinfo's name, a DST fold)
    # reduced to the offset in force, as the MessagePack formats store it.
    fixed = dt.timezone(offset)
    return value.replace(tzinfo=fixed, fold=0).isoformat(timespec="microseconds")


# --- JSON -> values ---------------------------------------------------------------------------


def decode_json(payload: bytes | memoryview) -> dict[str, Any]:
    """The property bag a JSON body's text (after the format byte) stands for;
    :class:`CorruptBody` if the text is not one."""
    try:
        data = _DECODER.decode(bytes(payload).decode("utf-8"))
    except CorruptBody:
        raise
    except (ValueError, RecursionError) as exc:  # bad UTF-8, bad JSON, too deep
        raise CorruptBody(f"undecodable JSON body ({type(exc).__name__}: {exc})") from exc
    if type(data) is not dict:
        raise CorruptBody(f"JSON body holds a {type(data).__name__}, not a property bag")
    for name, value in data.items():
        if type(value) in _CONTAINERS:
            data[name] = _from_json(value, name)
    return data


def _from_json(data: Any, path: str) -> Any:
    kind = type(data)
    if kind is list:
        return [
            _from_json(item, f"{path}[{n}]") if type(item) in _CONTAINERS else item
            for n, item in enumerate(data)
        ]
    if kind is dict:
        if len(data) == 1:
            ((key, payload),) = data.items()
            if key.startswith("$"):
                return _from_tagged(key, payload, path)
        return {
            key: _from_json(item, f"{path}.{key}") if type(item) in _CONTAINERS else item
            for key, item in data.items()
        }
    return data


def _from_tagged(tag: str, payload: Any, path: str) -> Any:
    if tag == "$dict":
        if type(payload) is not list:
            raise CorruptBody(f"{path}: $dict holds {type(payload).__name__}, not pairs")
        result: dict[Any, Any] = {}
        for n, pair in enumerate(payload):
            if type(pair) is not list or len(pair) != 2:
                raise CorruptBody(f"{path}: $dict item {n} is not a [key, value] pair")
            key = _from_json(pair[0], f"{path}[{n}].key")
            if type(key) in _CONTAINERS:
                raise CorruptBody(f"{path}: $dict key {n} is a {type(key).__name__}")
            value = pair[1]
            result[key] = _from_json(value, f"{path}[{n}]") if type(value) in _CONTAINERS else value
        return result
    if type(payload) is not str:
        raise CorruptBody(f"{path}: {tag} holds {type(payload).__name__}, not a string")
    try:
        if tag == "$datetime":
            value = dt.datetime.fromisoformat(payload)
            offset = value.utcoffset()
            if offset is None:
                raise ValueError("no UTC offset")
            return value.replace(tzinfo=dt.UTC if not offset else dt.timezone(offset))
        if tag == "$uuid":
            return uuid.UUID(payload)
        if tag == "$base64":
            return base64.b64decode(payload, validate=True)
        if tag == "$int":
            return int(payload)
        if tag == "$float":
            return _SPECIAL_FLOATS[payload]
    except (ValueError, KeyError, binascii.Error) as exc:
        raise CorruptBody(f"{path}: {tag} holds {payload!r}, which it cannot ({exc})") from exc
    raise CorruptBody(f"{path}: unknown tag {tag!r} (tags are {', '.join(TAGS)})")

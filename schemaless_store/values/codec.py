"""Body encoding: property bag <-> bytes, with no code execution on decode.

A stored body starts with one format byte naming how the rest is encoded, so the default codec
can change without rewriting old rows: every registered format stays readable. The formats:
MessagePack (``0x01``), MessagePack compressed with zlib (``0x02``), both written by
:class:`MsgpackCodec`, and JSON text the server's JSON functions read (``0x03``, written by
:class:`JsonCodec`, :mod:`.jsonbody`).

Supported values (they read back equal, and of the same type): ``str``, ``int`` (-2**63 to
2**64-1), ``float`` (NaN and infinities included), ``bool``, ``None``, ``list``, ``dict``,
``bytes``, ``uuid.UUID`` and timezone-aware ``datetime.datetime`` (read back with a fixed-offset
``timezone`` of the same UTC offset). Everything else, tuples and sets included, raises
:class:`~schemaless_store.exceptions.UnsupportedValue` rather than coming back as something else,
and so do lists and dicts nested more than :data:`MAX_NESTING` levels deep.
"""

from __future__ import annotations

import datetime as dt
import struct
import uuid
import zlib
from collections.abc import Mapping
from typing import Any, Protocol

import msgpack

from ..exceptions import CorruptBody, UnsupportedValue
from .jsonbody import FORMAT_JSON, decode_json, encode_json

_EXT_UUID = 1
_EXT_DATETIME = 2
_DATETIME = struct.Struct(">qi")  # microseconds since the epoch (UTC), UTC offset in seconds
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_NAIVE_EPOCH = dt.datetime(1970, 1, 1)

# Lists and dicts nest at most this deep: a property whose value is a list or dict is level 1, a
# list inside it level 2, and so on. MessagePack itself stops near 1023 levels, but the admin's
# JSON view and Python's own recursion limit (1000 frames) would fail long before that.
MAX_NESTING = 100
_CONTAINERS = frozenset((list, dict))
# Types MessagePack would quietly store as ``bytes``; they would come back as another type.
_CONVERTED = frozenset((bytearray, memoryview))
_WALKED = _CONTAINERS | _CONVERTED

# Format bytes. Never reuse one: rows written with it may still exist.
FORMAT_MSGPACK = 0x01
FORMAT_MSGPACK_ZLIB = 0x02
FORMATS = {FORMAT_MSGPACK: "msgpack", FORMAT_MSGPACK_ZLIB: "msgpack+zlib", FORMAT_JSON: "json"}


class Codec(Protocol):
    """What ``SCHEMALESS["CODEC"]`` names: turns a property bag into a body and back."""

    def encode(self, properties: Mapping[str, Any]) -> bytes: ...

    def decode(self, body: bytes) -> dict[str, Any]: ...


def _default(value: Any) -> Any:
    if type(value) is uuid.UUID:
        return msgpack.ExtType(_EXT_UUID, value.bytes)
    if type(value) is dt.datetime:
        offset = value.utcoffset()
        if offset is None:
            raise UnsupportedValue(
                f"naive datetime {value!r}: give it a timezone (datetime.UTC or zoneinfo)"
            )
        if offset.microseconds:
            raise UnsupportedValue(
                f"datetime {value!r}: its UTC offset is not a whole number of seconds"
            )
        delta = value - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return msgpack.ExtType(_EXT_DATETIME, _DATETIME.pack(micros, int(offset.total_seconds())))
    hint = " (use a list)" if isinstance(value, tuple | set | frozenset) else ""
    raise UnsupportedValue(f"cannot store a value of type {type(value).__name__}{hint}")


def check_values(properties: dict[str, Any]) -> None:
    """What MessagePack alone would let through: :class:`UnsupportedValue` if lists and dicts
    nest deeper than :data:`MAX_NESTING`, or for a ``bytearray`` or ``memoryview`` (stored as
    ``bytes``, they would read back as another type).

    Walks containers only, a level at a time (no recursion), so a flat bag costs one pass over
    its values.
    """
    level = 0
    todo = [v for v in properties.values() if type(v) in _WALKED]
    while todo:
        level += 1
        if level > MAX_NESTING:
            raise UnsupportedValue(
                f"lists and dicts nest more than {MAX_NESTING} levels deep "
                "(the limit is schemaless_store.values.codec.MAX_NESTING)"
            )
        inner: list[Any] = []
        for container in todo:
            kind = type(container)
            if kind in _CONVERTED:
                raise UnsupportedValue(f"cannot store a value of type {kind.__name__} (use bytes)")
            items = container.values() if kind is dict else container
            inner.extend([v for v in items if type(v) in _WALKED])
        todo = inner


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_UUID:
        return uuid.UUID(bytes=data)
    if code == _EXT_DATETIME:
        micros, offset = _DATETIME.unpack(data)
        tz = dt.UTC if offset == 0 else dt.timezone(dt.timedelta(seconds=offset))
        # From the local wall time, not through UTC: near datetime.min/max, the UTC instant of a
        # valid local time can lie outside datetime's range (year 0 or 10000).
        local = _NAIVE_EPOCH + dt.timedelta(microseconds=micros + offset * 1_000_000)
        return local.replace(tzinfo=tz)
    raise CorruptBody(f"unknown extension type {code}")


class MsgpackCodec:
    """MessagePack with typed extensions, zlib-compressed when that pays off.

    Bodies shorter than ``compress_min_bytes`` are stored as plain MessagePack: compressing them
    costs time and rarely saves space. See ``bench/`` for the measurements behind the defaults.
    """

    def __init__(self, compress_min_bytes: int = 512, level: int = 1) -> None:
        self.compress_min_bytes = compress_min_bytes
        self.level = level

    def encode(self, properties: Mapping[str, Any]) -> bytes:
        if type(properties) is dict:  # anything else is refused by packb below
            check_values(properties)
        try:
            packed = msgpack.packb(
                properties, use_bin_type=True, strict_types=True, default=_default, datetime=False
            )
        except UnsupportedValue:
            raise
        except (OverflowError, ValueError, TypeError) as exc:
            raise UnsupportedValue(f"cannot store this value: {exc}") from exc
        if len(packed) >= self.compress_min_bytes:
            compressed = zlib.compress(packed, self.level)
            if len(compressed) < len(packed):
                return bytes((FORMAT_MSGPACK_ZLIB,)) + compressed
        return bytes((FORMAT_MSGPACK,)) + packed

    def decode(self, body: bytes) -> dict[str, Any]:
        return decode_body(body)


class JsonCodec:
    """JSON text behind the format byte ``0x03`` (:mod:`.jsonbody`): MariaDB's JSON functions
    read the text after the byte (``tables.entities.JSON_BODY``). Never compressed (the server
    could not read it then); InnoDB page compression is the way to make its tables smaller
    (docs/performance.md)."""

    def encode(self, properties: Mapping[str, Any]) -> bytes:
        return bytes((FORMAT_JSON,)) + encode_json(properties, MAX_NESTING)

    def decode(self, body: bytes) -> dict[str, Any]:
        return decode_body(body)


def body_format(body: bytes) -> str:
    """The name of a stored body's format (``"msgpack"``, ``"msgpack+zlib"``, ``"json"``)."""
    if not body or body[0] not in FORMATS:
        raise CorruptBody(f"unknown body format byte {body[:1].hex() or '(empty body)'}")
    return FORMATS[body[0]]


def decode_body(body: bytes) -> dict[str, Any]:
    """Decode a body written by any registered format; :class:`CorruptBody` if it is not one."""
    if not body:
        raise CorruptBody("empty body")
    fmt, payload = body[0], memoryview(body)[1:]
    if fmt == FORMAT_JSON:
        return decode_json(payload)
    try:
        if fmt == FORMAT_MSGPACK_ZLIB:
            payload = memoryview(zlib.decompress(payload))
        elif fmt != FORMAT_MSGPACK:
            raise CorruptBody(f"unknown body format byte 0x{fmt:02x}")
        value = msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=_ext_hook)
    except CorruptBody:
        raise
    except Exception as exc:  # msgpack and zlib raise many types for damaged input
        raise CorruptBody(f"undecodable body ({type(exc).__name__}: {exc})") from exc
    if not isinstance(value, dict):
        raise CorruptBody(f"body holds a {type(value).__name__}, not a property bag")
    return value

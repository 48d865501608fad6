"""Body encoding: property bag <-> bytes, with no code execution on decode.

A stored body starts with one format byte naming how the rest is encoded, so the default codec
can change without rewriting old rows: every registered format stays readable.

Supported values (they read back equal, and of the same type): ``str``, ``int`` (-2**63 to
2**64-1), ``float`` (NaN and infinities included), ``bool``, ``None``, ``list``, ``dict``,
``bytes``, ``uuid.UUID`` and timezone-aware ``datetime.datetime`` (read back with a fixed-offset
``timezone`` of the same UTC offset). Everything else, tuples and sets included, raises
:class:`~schemaless_store.exceptions.UnsupportedValue` rather than coming back as something else.
"""

from __future__ import annotations

import datetime as dt
import struct
import uuid
import zlib
from typing import Any, Protocol

import msgpack

from .exceptions import CorruptBody, UnsupportedValue

_EXT_UUID = 1
_EXT_DATETIME = 2
_DATETIME = struct.Struct(">qi")  # microseconds since the epoch (UTC), UTC offset in seconds
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

# Format bytes. Never reuse one: rows written with it may still exist.
FORMAT_MSGPACK = 0x01
FORMAT_MSGPACK_ZLIB = 0x02


class Codec(Protocol):
    """What ``SCHEMALESS["CODEC"]`` names: turns a property bag into a body and back."""

    def encode(self, properties: dict[str, Any]) -> bytes: ...

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
        delta = value - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return msgpack.ExtType(_EXT_DATETIME, _DATETIME.pack(micros, int(offset.total_seconds())))
    hint = " (use a list)" if isinstance(value, tuple | set | frozenset) else ""
    raise UnsupportedValue(f"cannot store a value of type {type(value).__name__}{hint}")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_UUID:
        return uuid.UUID(bytes=data)
    if code == _EXT_DATETIME:
        micros, offset = _DATETIME.unpack(data)
        tz = dt.UTC if offset == 0 else dt.timezone(dt.timedelta(seconds=offset))
        return (_EPOCH + dt.timedelta(microseconds=micros)).astimezone(tz)
    raise CorruptBody(f"unknown extension type {code}")


class MsgpackCodec:
    """MessagePack with typed extensions, zlib-compressed when that pays off.

    Bodies shorter than ``compress_min_bytes`` are stored as plain MessagePack: compressing them
    costs time and rarely saves space. See ``bench/`` for the measurements behind the defaults.
    """

    def __init__(self, compress_min_bytes: int = 512, level: int = 1) -> None:
        self.compress_min_bytes = compress_min_bytes
        self.level = level

    def encode(self, properties: dict[str, Any]) -> bytes:
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


def decode_body(body: bytes) -> dict[str, Any]:
    """Decode a body written by any registered format; :class:`CorruptBody` if it is not one."""
    if not body:
        raise CorruptBody("empty body")
    fmt, payload = body[0], memoryview(body)[1:]
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

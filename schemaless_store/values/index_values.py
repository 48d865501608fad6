"""Index values: their order-preserving encoding and the index column types.

Nothing here knows about Django or SQL. Index values are encoded so that comparing the encoded
bytes (``memcmp``, which is how MySQL compares ``VARBINARY`` and SQLite compares ``BLOB``) gives
the same order as comparing the values, and the query path compares the same encodings when it
re-checks an entity, so SQL and Python can never disagree about what matches.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
import uuid
from typing import Any

from ..exceptions import IndexValueError, IndexValueTooLong

# --- order-preserving encoding of scalar values ---------------------------------------------

_TAG_NONE = b"\x10"
_TAG_FALSE = b"\x20"
_TAG_TRUE = b"\x21"
_TAG_NUMBER = b"\x30"
_TAG_STR = b"\x50"
_TAG_BYTES = b"\x60"
_TAG_UUID = b"\x70"
_TAG_DATETIME = b"\x80"

_U64 = struct.Struct(">Q")
_DOUBLE = struct.Struct(">d")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _sortable_double(x: float) -> bytes:
    (bits,) = _U64.unpack(_DOUBLE.pack(x))
    bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | (1 << 63)
    return _U64.pack(bits)


_INT_KEY = struct.Struct(">cQQ")  # the number tag, the sortable double, the exact int
_SIGN_BIT, _ALL_BITS = 1 << 63, (1 << 64) - 1


def _int_key(value: int) -> bytes:
    """:func:`_number_key` of an int: one ``pack`` (every index row and re-check of an int
    property encodes one)."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise IndexValueError(f"integer {value} is outside the indexable range (64-bit)")
    (bits,) = _U64.unpack(_DOUBLE.pack(value))
    sortable = bits ^ _ALL_BITS if bits >> 63 else bits | _SIGN_BIT
    return _INT_KEY.pack(_TAG_NUMBER, sortable, value - _INT64_MIN)


def _number_key(value: int | float) -> bytes:
    # Ints and floats share one family so that 1 == 1.0 and 2 < 2.5 hold in SQL as in Python.
    # The double orders them; an exact int suffix separates ints that round to the same double.
    if not isinstance(value, float):
        return _int_key(value)
    if math.isnan(value):
        raise IndexValueError("NaN cannot be indexed: it is not equal to itself")
    if value == 0:
        value = 0.0  # -0.0 == 0.0
    if not value.is_integer():
        return _TAG_NUMBER + _sortable_double(value)
    if value >= 2**63:
        return _TAG_NUMBER + _sortable_double(value) + b"\xff" * 9
    if value < _INT64_MIN:
        return _TAG_NUMBER + _sortable_double(value)
    return _int_key(int(value))


def _micros(value: dt.datetime) -> int:
    if value.utcoffset() is None:
        raise IndexValueError(f"naive datetime {value!r} cannot be indexed; give it a timezone")
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def encode_key(value: Any) -> bytes:
    """Order-preserving bytes for a scalar index value.

    Families sort as: None < False < True < numbers < str < bytes < UUID < datetime. Within a
    family the order is the value order (strings by code point, bytes bytewise).
    """
    kind = type(value)
    if kind is str:
        try:
            return _TAG_STR + value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise IndexValueError(f"string with unencodable character: {exc}") from exc
    if kind is int:
        return _int_key(value)
    if kind is float:
        return _number_key(value)
    if kind is bytes:
        return _TAG_BYTES + value
    if value is None:
        return _TAG_NONE
    if kind is bool:
        return _TAG_TRUE if value else _TAG_FALSE
    if kind is uuid.UUID:
        return _TAG_UUID + value.bytes
    if kind is dt.datetime:
        return _TAG_DATETIME + _U64.pack(_micros(value) - _INT64_MIN)
    raise IndexValueError(f"a {kind.__name__} cannot be an index value")


def decode_key(data: bytes) -> Any:
    """The value an :func:`encode_key` output stands for (for messages and the admin).

    An integral float comes back as the int it is indexed as (``1.0`` and ``1`` are one key).
    Raises ``ValueError`` for bytes that :func:`encode_key` does not produce.
    """
    tag, rest = data[:1], data[1:]
    if tag == _TAG_STR:
        return rest.decode("utf-8")
    if tag == _TAG_BYTES:
        return rest
    if tag == _TAG_NONE and not rest:
        return None
    if tag in (_TAG_FALSE, _TAG_TRUE) and not rest:
        return tag == _TAG_TRUE
    if tag == _TAG_UUID and len(rest) == 16:
        return uuid.UUID(bytes=rest)
    if tag == _TAG_DATETIME and len(rest) == 8:
        try:
            return _EPOCH + dt.timedelta(microseconds=_U64.unpack(rest)[0] + _INT64_MIN)
        except OverflowError:  # an instant of year 0 or 10000 (datetime.min/max, offset)
            raise ValueError(f"datetime key outside datetime's range: {data.hex()}") from None
    if tag == _TAG_NUMBER and len(rest) in (8, 16, 17):  # double, + exact int, + "beyond int64"
        if len(rest) == 16:
            return _U64.unpack(rest[8:])[0] + _INT64_MIN
        (bits,) = _U64.unpack(rest[:8])
        bits = bits & ~(1 << 63) if bits >> 63 else bits ^ 0xFFFFFFFFFFFFFFFF
        return _DOUBLE.unpack(_U64.pack(bits))[0]
    raise ValueError(f"not an encoded index key: {data.hex()}")


def decimal_key(value: Any) -> bytes:
    """Order-preserving bytes for a decimal number (a ``Decimal``, an int, or the text a kind
    stores a ``DecimalField``'s value as): ``b"\\x80"`` for zero; else a sign byte, the
    exponent (biased, inverted for negatives) and the digits (inverted and closed by
    ``\\xff`` for negatives, so that a longer magnitude sorts first). None sorts first."""
    if value is None:
        return b"\x00"
    if isinstance(value, bool) or not isinstance(value, decimal.Decimal | int | str):
        raise IndexValueError(f"a decimal column cannot hold a {type(value).__name__}")
    try:
        number = decimal.Decimal(value)
    except decimal.InvalidOperation:
        raise IndexValueError(f"{value!r} is not a decimal number") from None
    if not number.is_finite():
        raise IndexValueError(f"{number} cannot be indexed as a decimal")
    if number.is_zero():
        return b"\x80"
    sign, digits, _exponent = number.normalize().as_tuple()
    exponent = number.adjusted() + 2**31
    text = bytes(48 + d for d in digits)
    if not sign:
        return b"\x81" + struct.pack(">I", exponent) + text
    inverted = bytes(255 - b for b in struct.pack(">I", exponent) + text)
    return b"\x7f" + inverted + b"\xff"


# --- index column types -------------------------------------------------------------------


class ColumnType:
    """How one indexed property is stored in its index column.

    ``to_db`` turns a property value into the column value (raising :class:`IndexValueError` if
    it does not fit); equal column values mean equal keys, and column order is key order.
    """

    name: str = ""
    # The type of every value ``to_db`` returns (bytes, int or float), which lets index rows be
    # written as literals without the driver's escaping (:mod:`..sql.literals`); None:
    # unknown, the driver renders them.
    python_type: type | None = None

    def __init__(self, max_bytes: int = 255) -> None:
        self.max_bytes = max_bytes

    def to_db(self, value: Any) -> Any:
        raise NotImplementedError

    def from_db(self, value: Any) -> Any:
        """The property value a column value stands for (the inverse of :meth:`to_db`, for
        display); ``ValueError`` for a value this column type never produces."""
        return bytes(value) if isinstance(value, bytearray | memoryview) else value

    def sql_type(self, vendor: str) -> str:
        raise NotImplementedError

    def _varbinary(self, vendor: str) -> str:
        return f"VARBINARY({self.max_bytes})" if vendor == "mysql" else "BLOB"

    def _check_length(self, encoded: bytes) -> bytes:
        if len(encoded) > self.max_bytes:
            raise IndexValueTooLong(
                f"value is {len(encoded)} bytes once encoded; the column holds {self.max_bytes}"
            )
        return encoded

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_bytes={self.max_bytes})"


class KeyColumn(ColumnType):
    """The default: any scalar, stored with :func:`encode_key` in a ``VARBINARY``."""

    name = "key"
    python_type = bytes

    def to_db(self, value: Any) -> bytes:
        return self._check_length(encode_key(value))

    def from_db(self, value: Any) -> Any:
        return decode_key(bytes(value))

    def sql_type(self, vendor: str) -> str:
        return self._varbinary(vendor)


class IntColumn(ColumnType):
    """``BIGINT``: Python ints only (not bools)."""

    name = "int"
    python_type = int

    def to_db(self, value: Any) -> int:
        if type(value) is not int:
            raise IndexValueError(f"an int column cannot hold a {type(value).__name__}")
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise IndexValueError(f"integer {value} is outside the BIGINT range")
        return value

    def sql_type(self, vendor: str) -> str:
        return "BIGINT"


class FloatColumn(ColumnType):
    """``DOUBLE``: ints and floats, NaN and infinities refused."""

    name = "float"
    python_type = float

    def to_db(self, value: Any) -> float:
        if type(value) not in (int, float):
            raise IndexValueError(f"a float column cannot hold a {type(value).__name__}")
        result = float(value)
        if math.isnan(result):
            raise IndexValueError("NaN cannot be indexed: it is not equal to itself")
        if math.isinf(result):  # the "key" column type holds them
            raise IndexValueError("a float column cannot hold an infinity (MySQL's DOUBLE cannot)")
        return result + 0.0  # -0.0 -> 0.0

    def sql_type(self, vendor: str) -> str:
        return "DOUBLE" if vendor == "mysql" else "REAL"


class StrColumn(ColumnType):
    """UTF-8 bytes in a ``VARBINARY``: compares by code point, no collation or padding rules."""

    name = "str"
    python_type = bytes

    def to_db(self, value: Any) -> bytes:
        if type(value) is not str:
            raise IndexValueError(f"a str column cannot hold a {type(value).__name__}")
        try:
            return self._check_length(value.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise IndexValueError(f"string with unencodable character: {exc}") from exc

    def from_db(self, value: Any) -> str:
        return bytes(value).decode("utf-8")

    def sql_type(self, vendor: str) -> str:
        return self._varbinary(vendor)


class BytesColumn(ColumnType):
    """Raw bytes in a ``VARBINARY``."""

    name = "bytes"
    python_type = bytes

    def to_db(self, value: Any) -> bytes:
        if type(value) is not bytes:
            raise IndexValueError(f"a bytes column cannot hold a {type(value).__name__}")
        return self._check_length(value)

    def from_db(self, value: Any) -> bytes:
        return bytes(value)

    def sql_type(self, vendor: str) -> str:
        return self._varbinary(vendor)


class UUIDColumn(ColumnType):
    """``BINARY(16)``: ``uuid.UUID`` values."""

    name = "uuid"
    python_type = bytes

    def to_db(self, value: Any) -> bytes:
        if type(value) is not uuid.UUID:
            raise IndexValueError(f"a uuid column cannot hold a {type(value).__name__}")
        return value.bytes

    def from_db(self, value: Any) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(value))

    def sql_type(self, vendor: str) -> str:
        return "BINARY(16)" if vendor == "mysql" else "BLOB"


class DateTimeColumn(ColumnType):
    """``BIGINT`` microseconds since the epoch (UTC): aware datetimes only."""

    name = "datetime"
    python_type = int

    def to_db(self, value: Any) -> int:
        if type(value) is not dt.datetime:
            raise IndexValueError(f"a datetime column cannot hold a {type(value).__name__}")
        return _micros(value)

    def from_db(self, value: Any) -> dt.datetime:
        return _EPOCH + dt.timedelta(microseconds=int(value))

    def sql_type(self, vendor: str) -> str:
        return "BIGINT"


class DecimalColumn(ColumnType):
    """Decimal numbers in a ``VARBINARY``, by :func:`decimal_key`: what a kind's
    ``DecimalField`` is indexed as (its body holds the number as text, which would sort
    ``"10"`` before ``"9"``)."""

    name = "decimal"
    python_type = bytes

    def to_db(self, value: Any) -> bytes:
        return self._check_length(decimal_key(value))

    def from_db(self, value: Any) -> decimal.Decimal | None:
        data = bytes(value)
        if data == b"\x00":
            return None
        if data == b"\x80":
            return decimal.Decimal(0)
        negative = data[:1] == b"\x7f"
        body = bytes(255 - b for b in data[1:-1]) if negative else data[1:]
        exponent = struct.unpack(">I", body[:4])[0] - 2**31
        digits = body[4:].decode("ascii")
        number = decimal.Decimal(f"{'-' if negative else ''}0.{digits}")
        return number.scaleb(exponent + 1)

    def sql_type(self, vendor: str) -> str:
        return self._varbinary(vendor)


COLUMN_TYPES: dict[str, type[ColumnType]] = {
    cls.name: cls
    for cls in (
        KeyColumn,
        IntColumn,
        FloatColumn,
        StrColumn,
        BytesColumn,
        UUIDColumn,
        DateTimeColumn,
        DecimalColumn,
    )
}

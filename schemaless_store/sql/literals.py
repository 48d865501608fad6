"""Multi-row ``INSERT`` statements for MariaDB, rendered from values of known types.

MySQLdb's ``executemany`` renders every value through ``Connection.literal`` (a Python call and
a type dispatch per value), and a backfill sends millions of rows
(docs/performance-history.md). Index columns hold only ``bytes``, ``int`` and finite ``float``
values (:mod:`..values.index_values`, each column
type's ``python_type``), and those have literals that need no escaping: ``X'<hex digits>'``,
decimal digits, and ``repr`` with an exponent (so MariaDB reads a ``DOUBLE``, not a
``DECIMAL``). Rows a bucket move copies also hold naive ``datetime`` values (``DATETIME``
columns as MySQLdb reads them), written ``'YYYY-MM-DD HH:MM:SS.ffffff'``. A
:class:`RowFormat` turns a row into its literal with one ``%``. Nothing from a value can reach
the statement but hex digits and the characters of a number or a date, so there is nothing to
inject; a value of another type raises ``TypeError``.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import operator
from binascii import hexlify
from collections.abc import Callable, Iterator, Sequence
from typing import Any

# Largest statement sent at once; a longer batch goes as several statements. (MySQLdb's
# executemany splits at 64 KiB of escaped text; hex literals are longer, and the store's
# batches, 500 index rows, fit one statement either way.)
MAX_STATEMENT_BYTES = 1_000_000


def _float_literal(value: Any) -> bytes:
    if type(value) not in (float, int):
        raise TypeError(f"a {type(value).__name__} in a float column")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{number!r} has no SQL literal")
    text = repr(number)
    return (text if "e" in text else text + "e0").encode("ascii")


def _int_literal(value: Any) -> bytes:
    return b"%d" % operator.index(value)  # TypeError for a float or a str


def _datetime_literal(value: Any) -> bytes:
    # A naive datetime (MySQLdb reads a DATETIME as one): digits, '-', ':', ' ' and '.' only.
    if type(value) is not dt.datetime or value.tzinfo is not None:
        raise TypeError(f"a {type(value).__name__} in a naive datetime column")
    return value.isoformat(" ").encode("ascii")


_LITERALS: dict[type, tuple[bytes, Callable[[Any], bytes]]] = {
    bytes: (b"X'%b'", hexlify),  # hexlify takes any buffer; anything else is a TypeError
    int: (b"%b", _int_literal),
    float: (b"%b", _float_literal),
    dt.datetime: (b"'%b'", _datetime_literal),  # copied rows' DATETIME columns (moves)
}


# The Python types that have a literal here.
TYPES = frozenset(_LITERALS)


class RowFormat:
    """How to render rows whose columns hold the given Python types (``bytes``, ``int``,
    ``float``), as ``(v1,v2,...)``."""

    __slots__ = ("_all_bytes", "_converters", "_template")

    def __init__(self, column_types: Sequence[type]) -> None:
        unknown = [t for t in column_types if t not in _LITERALS]
        if unknown or not column_types:
            raise TypeError(f"no literal for column types {unknown or column_types!r}")
        self._template = b"(" + b",".join(_LITERALS[t][0] for t in column_types) + b")"
        self._converters = tuple(_LITERALS[t][1] for t in column_types)
        self._all_bytes = all(t is bytes for t in column_types)

    def render(self, row: Sequence[Any]) -> bytes:
        if len(row) != len(self._converters):
            raise TypeError(f"a row of {len(row)} values for {len(self._converters)} columns")
        if self._all_bytes:  # index rows of key columns: the common case, all in C
            return self._template % tuple(map(hexlify, row))
        return self._template % tuple(c(v) for c, v in zip(self._converters, row, strict=True))


class Insert:
    """A multi-row ``INSERT``: the text before the rows, the rows' format, the text after."""

    __slots__ = ("_head", "_row_format", "_tail")

    def __init__(self, head: str, row_format: RowFormat, tail: str = "") -> None:
        self._head, self._tail = head.encode("ascii"), tail.encode("ascii")
        self._row_format = row_format

    def statements(self, rows: Sequence[Sequence[Any]]) -> Iterator[str]:
        """The statements that insert ``rows``, each at most :data:`MAX_STATEMENT_BYTES`
        long (a single longer row still goes, alone)."""
        head, tail, render = self._head, self._tail, self._row_format.render
        if len(rows) == 1:  # a single put's row
            yield (head + render(rows[0]) + tail).decode("ascii")
            return
        parts: list[bytes] = []
        size = len(head) + len(tail)
        for row in rows:
            literal = render(row)
            if parts and size + len(literal) + 1 > MAX_STATEMENT_BYTES:
                yield (head + b",".join(parts) + tail).decode("ascii")
                parts, size = [], len(head) + len(tail)
            parts.append(literal)
            size += len(literal) + 1
        if parts:
            yield (head + b",".join(parts) + tail).decode("ascii")


def statement(driver: Any, sql: str, params: Sequence[Any]) -> bytes:
    """``sql`` (``%s`` placeholders) with ``params`` as the driver connection's literals, as
    mysqlclient's cursor renders a statement: what the store sends with the driver's own calls
    (reads, and the statements a commit's batch carries). Placeholders that do not match the
    values raise the driver's ``ProgrammingError``, as the cursor's do."""
    try:
        return _encoded(sql, driver.encoding) % tuple(map(driver.literal, params))
    except TypeError as exc:
        raise driver.ProgrammingError(str(exc)) from None


@functools.lru_cache(maxsize=256)
def _encoded(sql: str, encoding: str) -> bytes:
    return sql.encode(encoding)

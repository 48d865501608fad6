"""The read path's re-check on the server: whether a JSON body implies an index row, as SQL.

A query re-checks that each entity it finds implies the index row that found it
(:meth:`~..config.indexes.Index.implies`; the row meets the conditions by the scan's own
``WHERE``). For a body in the JSON format (``0x03``, :mod:`..values.jsonbody`) MariaDB can
answer that itself for the values it compares exactly as Python does, so a stale row's entity
is never sent, and a proven one is not decoded to be checked (docs/design.md, "Re-check on the
server").

:func:`implies_sql` is an expression in SQL's three values, one clause per index property:

- ``TRUE``: the body implies the row (Python would say so: nothing to re-check);
- ``FALSE``: it does not (Python would drop the row: the statement drops it);
- ``NULL``: the server cannot prove either way, so Python re-checks: a body in another format
  (a store mid-``rewritebodies``), a list (several rows, App Engine's multi-valued rule), a
  float (an integral float is indexed as the int it equals, a float's key is its double's
  bits), and a tagged value (bytes, UUID, datetime, an int beyond JSON's safe range, ...).

What the server decides, per column type (``v`` the property's JSON value; anything else
``NULL``):

========  ==========================================================================
``key``   missing: FALSE; a string: the row is ``x'50'`` and its UTF-8 bytes (compared as
          bytes: no collation, no case folding, no normalisation); ``true``/``false``:
          ``x'21'``/``x'20'``; ``null``: ``x'10'``; an integer: a 17-byte ``x'30'`` key whose
          exact part (its last 8 bytes, the int plus 2**63) is that integer, compared as
          ``DECIMAL``
``int``   missing, a string, a boolean, ``null``, a float: FALSE (Python refuses them); an
          integer: the ``BIGINT`` equals it as ``DECIMAL``
``float`` missing, a string, a boolean, ``null``: FALSE; an integer within ±(2**53 - 1): the
          ``DOUBLE`` equals it (exact); a float: ``NULL``
``str``   missing, a number, a boolean, ``null``: FALSE; a string: its UTF-8 bytes
``bytes``, ``uuid``, ``datetime``
          missing, a string, a number, a boolean, ``null``: FALSE (only a tagged value
          could be one)
========  ==========================================================================

An index with a column of any other type (``decimal``, one's own) is not *plain*:
:func:`implies_sql` gives None and Python re-checks every entity as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config.indexes import KIND_PROPERTY, Index, is_identifier
from ..values import index_values as iv
from ..values.entity_ids import PLACED_MARK
from .entities import JSON_BODY

# The int key's exact part is the int plus this (index_values._int_key).
_INT_OFFSET = 2**63
_SAFE_INT = 2**53 - 1

# JSON_TYPE's answers (MariaDB), and MISSING for a property the body lacks.
_FALSE_FOR: dict[type[iv.ColumnType], tuple[str, ...]] = {
    iv.IntColumn: ("MISSING", "STRING", "BOOLEAN", "NULL", "DOUBLE"),
    iv.FloatColumn: ("MISSING", "STRING", "BOOLEAN", "NULL"),
    iv.StrColumn: ("MISSING", "INTEGER", "DOUBLE", "BOOLEAN", "NULL"),
    iv.BytesColumn: ("MISSING", "STRING", "INTEGER", "DOUBLE", "BOOLEAN", "NULL"),
    iv.UUIDColumn: ("MISSING", "STRING", "INTEGER", "DOUBLE", "BOOLEAN", "NULL"),
    iv.DateTimeColumn: ("MISSING", "STRING", "INTEGER", "DOUBLE", "BOOLEAN", "NULL"),
    iv.KeyColumn: ("MISSING",),
}


def _value(body: str, path: str) -> str:
    return f"JSON_VALUE({body}, '{path}')"


def _equal_when(column_type: iv.ColumnType, col: str, body: str, path: str) -> dict[str, str]:
    """``{JSON type: the row's column equals the value}`` for the types the server compares."""
    value = _value(body, path)
    kind = type(column_type)
    exact_int = f"CAST({value} AS DECIMAL(30, 0))"
    if kind is iv.KeyColumn:
        return {
            "STRING": f"{col} = CONCAT(x'50', CAST({value} AS BINARY))",
            # JSON_VALUE answers '1' and '0' for true and false; JSON_EXTRACT, the JSON text.
            "BOOLEAN": f"{col} = IF(JSON_EXTRACT({body}, '{path}') = 'true', x'21', x'20')",
            "NULL": f"{col} = x'10'",
            "INTEGER": (
                f"(LENGTH({col}) = 17 AND LEFT({col}, 1) = x'30' AND "
                f"CAST(CONV(HEX(SUBSTRING({col}, 10, 8)), 16, 10) AS DECIMAL(30, 0)) "
                f"- {_INT_OFFSET} = {exact_int})"
            ),
        }
    if kind is iv.IntColumn:
        return {"INTEGER": f"{col} = {exact_int}"}
    if kind is iv.FloatColumn:
        return {
            "INTEGER": f"IF(ABS({exact_int}) <= {_SAFE_INT}, {col} = {exact_int}, NULL)",
        }
    if kind is iv.StrColumn:
        return {"STRING": f"{col} = CAST({value} AS BINARY)"}
    return {}


def plain(index: Index) -> bool:
    """Whether the server can re-check rows of ``index``: every column of a type it compares
    (:data:`_FALSE_FOR`), every name an identifier."""
    return all(type(index.columns[p]) in _FALSE_FOR and is_identifier(p) for p in index.properties)


def implies_sql(
    index: Index, row: str, quote: Callable[[str], str], body: str = "e.body"
) -> tuple[str, list[Any]] | None:
    """The three-valued SQL of "the body ``body`` implies the row ``row`` of ``index``" (see the
    module docs) and its parameters; None if ``index`` is not :func:`plain`. ``row`` is the
    alias of the row's table (its columns are the index's, quoted), ``body`` a ``body``
    column."""
    if not plain(index):
        return None
    text = JSON_BODY.replace("body", body)
    clauses = []
    params: list[Any] = []
    if index.kind is not None:
        # rows_for: an entity of another kind (or none) implies no row of a kind's index.
        path = f"$.{KIND_PROPERTY}"
        clauses.append(
            f"IF({_type(text, path)} = 'STRING', "
            f"CAST({_value(text, path)} AS BINARY) = CAST(%s AS BINARY), FALSE)"
        )
        params.append(index.kind)
    for prop in index.properties:
        path = f"$.{prop}"
        column_type = index.columns[prop]
        branches = [f"WHEN '{t}' THEN FALSE" for t in _FALSE_FOR[type(column_type)]]
        for json_type, test in _equal_when(column_type, f"{row}.{quote(prop)}", text, path).items():
            branches.append(f"WHEN '{json_type}' THEN {test}")
        clauses.append(f"(CASE {_type(text, path)} {' '.join(branches)} ELSE NULL END)")
    # A body that is not JSON: NULL, whatever the clauses would say of it.
    return f"IF({text} IS NULL, NULL, {' AND '.join(clauses)})", params


def _type(body: str, path: str) -> str:
    """The JSON type of the value at ``path``; MISSING where the body has none."""
    return f"IFNULL(JSON_TYPE(JSON_EXTRACT({body}, '{path}')), 'MISSING')"


def placed_bucket_sql(column: str) -> str:
    """The bucket a placed id in ``column`` carries, modulo ``%s`` (the bucket count), NULL
    for an id that is not placed (values/bucket_hash.py)."""
    mark = PLACED_MARK.hex()
    return (
        f"IF(SUBSTRING({column}, 7, 3) = x'{mark}', "
        f"(ASCII(SUBSTRING({column}, 10, 1)) * 256 + ASCII(SUBSTRING({column}, 11, 1))) MOD %s, "
        "NULL)"
    )

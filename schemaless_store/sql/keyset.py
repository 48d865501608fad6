"""Keyset continuation: the rows after a key, in an order of several columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def after(
    columns: Sequence[str], last: Sequence[Any], descending: bool = False
) -> tuple[str, list[Any]]:
    """``(c1, c2, ...) > (v1, v2, ...)`` (``<`` when ``descending``), spelled out so every
    backend can seek with it: a bound on the first column, then the row comparison as ORs."""
    op = "<" if descending else ">"
    ors: list[str] = []
    params: list[Any] = []
    for n in range(len(columns)):
        parts = [f"{columns[m]} = %s" for m in range(n)] + [f"{columns[n]} {op} %s"]
        ors.append("(" + " AND ".join(parts) + ")")
        params.extend(last[: n + 1])
    return f"{columns[0]} {op}= %s AND ({' OR '.join(ors)})", [last[0], *params]


def page(
    selected: str, table: str, columns: Sequence[str], last: Sequence[Any] | None, limit: int
) -> tuple[str, list[Any]]:
    """``SELECT selected FROM table`` after ``last`` (None: from the start) in the order of
    ``columns``, ``limit`` rows: a keyset walk's next page, with its parameters."""
    where, params = "", list[Any]()
    if last is not None:
        bound, params = after(columns, list(last))
        where = f" WHERE {bound}"
    order = ", ".join(columns)
    return f"SELECT {selected} FROM {table}{where} ORDER BY {order} LIMIT {int(limit)}", params

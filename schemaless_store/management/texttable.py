"""Tables of text for the commands' output: columns padded to their widest cell, as Django's
``showmigrations`` and ``inspectdb`` line things up. Numbers are right-aligned."""

from __future__ import annotations

from collections.abc import Sequence

GAP = "  "


def text_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """The lines of a table: the header, a rule, then one line per row (``None`` shows as
    ``-``, whole numbers with thousands separators, right-aligned)."""
    cells = [[_cell(value) for value in row] for row in rows]
    numeric = [
        bool(rows) and all(isinstance(row[n], int) and not isinstance(row[n], bool) for row in rows)
        for n in range(len(headers))
    ]
    widths = [
        max([len(header), *(len(row[n]) for row in cells)]) for n, header in enumerate(headers)
    ]

    def line(values: Sequence[str]) -> str:
        padded = [
            value.rjust(width) if right else value.ljust(width)
            for value, width, right in zip(values, widths, numeric, strict=True)
        ]
        return GAP.join(padded).rstrip()

    return [line(list(headers)), line(["-" * w for w in widths]), *(line(row) for row in cells)]


def _cell(value: object) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)

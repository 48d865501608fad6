#!/usr/bin/env python3
"""Render the reliability suite's JSON-lines report(s) as the Markdown table of docs/reliability.md.

Usage::

    python scripts/reliability_table.py REPORT.jsonl [MORE.jsonl ...] > table.md

Each line is one row written by ``tests/support/reliability_report.record()``: ``fault``,
``backend``, ``cases``, ``data_lost``, ``wrong_results``, optionally ``failures`` (problems that
are neither data lost nor a wrong result; rows of older reports have none) and details, ignored
here. A row is recorded whether its class passed or failed, so a failure shows: in the data lost
and wrong results columns, and as "N other failures" after the class's name. Rows of the same fault
and backend (several runs appended to one file, or several files) are added up. Faults keep the
order in which they first appear; backends are listed in that order too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

COLUMNS = ("Fault or input class", "Backend", "Cases run", "Data lost", "Wrong results")
COUNTS = ("cases", "data_lost", "wrong_results")
OPTIONAL_COUNTS = ("failures",)


class ReportError(ValueError):
    """A line of a report is not a row ``record()`` writes."""


def read_rows(paths: Iterable[Path]) -> list[dict[str, object]]:
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ReportError(f"{path}:{number}: not JSON ({exc})") from None
                if not isinstance(row, dict):
                    raise ReportError(f"{path}:{number}: not a JSON object")
                missing = [k for k in ("fault", "backend", *COUNTS) if k not in row]
                if missing:
                    raise ReportError(f"{path}:{number}: missing {', '.join(missing)}")
                for key in (*COUNTS, *OPTIONAL_COUNTS):
                    if key not in row:
                        continue
                    value = row[key]
                    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                        raise ReportError(f"{path}:{number}: {key} is not a count: {value!r}")
                rows.append(row)
    return rows


def totals(rows: Iterable[dict[str, object]]) -> dict[tuple[str, str], dict[str, int]]:
    """Counts added up per (fault, backend), in order of first appearance."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for row in rows:
        key = (str(row["fault"]), str(row["backend"]))
        summed = out.setdefault(key, dict.fromkeys((*COUNTS, *OPTIONAL_COUNTS), 0))
        for count in (*COUNTS, *OPTIONAL_COUNTS):
            summed[count] += int(row.get(count, 0))  # type: ignore[call-overload]
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(rows: Iterable[dict[str, object]]) -> str:
    """The Markdown table, one line per fault and backend (faults grouped together)."""
    summed = totals(rows)
    faults = list(dict.fromkeys(fault for fault, _backend in summed))
    backends = list(dict.fromkeys(backend for _fault, backend in summed))
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(["---", "---", "---:", "---:", "---:"]) + "|",
    ]
    for fault in faults:
        for backend in backends:
            counts = summed.get((fault, backend))
            if counts is None:
                continue
            name = fault
            if counts["failures"]:
                plural = "s" if counts["failures"] > 1 else ""
                name += f" ({counts['failures']} other failure{plural})"
            cells = [_cell(name), _cell(backend), *(str(counts[c]) for c in COUNTS)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        rows = read_rows(Path(arg) for arg in argv)
    except (OSError, ReportError) as exc:
        print(f"reliability_table: {exc}", file=sys.stderr)
        return 1
    if not rows:
        print("reliability_table: the report is empty", file=sys.stderr)
        return 1
    sys.stdout.write(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Render the reliability suite's JSON-lines report as the Markdown table of docs/reliability.md.

    SCHEMALESS_RELIABILITY_REPORT=var/reliability.jsonl SCHEMALESS_TEST_DB=mariadb \\
        .venv/bin/python -m pytest -m reliability
    .venv/bin/python scripts/reliability_table.py var/reliability.jsonl

Rows of the same fault class and backend (several runs) are added up.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

COLUMNS = ("fault or input class", "backend", "cases run", "data lost", "wrong results")


def load(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise SystemExit(f"{path}:{number}: not JSON: {exc}") from exc
            missing = {"fault", "backend", "cases", "data_lost", "wrong_results"} - set(row)
            if missing:
                raise SystemExit(f"{path}:{number}: missing {sorted(missing)}")
            rows.append(row)
    return rows


def render(rows: list[dict]) -> str:
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in rows:
        total = totals[row["fault"], row["backend"]]
        total[0] += int(row["cases"])
        total[1] += int(row["data_lost"])
        total[2] += int(row["wrong_results"])
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|---|---:|---:|---:|"]
    for (fault, backend), (cases, lost, wrong) in sorted(totals.items()):
        lines.append(f"| {fault} | {backend} | {cases} | {lost} | {wrong} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(render(load([Path(arg) for arg in argv])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The reliability suite's record of what it ran: ``record()`` one row per fault or input class.

When ``SCHEMALESS_RELIABILITY_REPORT`` names a file, each row is appended to it as one JSON line
(``scripts/reliability_table.py`` renders them as the table in ``docs/reliability.md``).
"""

from __future__ import annotations

import json
import os


def record(fault: str, cases: int, data_lost: int, wrong_results: int, **details: object) -> None:
    path = os.environ.get("SCHEMALESS_RELIABILITY_REPORT")
    if not path:
        return
    from django.conf import settings

    row = {
        "fault": fault,
        "backend": settings.BACKEND,
        "cases": cases,
        "data_lost": data_lost,
        "wrong_results": wrong_results,
        **details,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(row, default=str) + "\n")

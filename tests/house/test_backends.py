"""One place per backend: the package asks a backend's dialect (``sql/dialects/``) what it can
do and how it spells a statement, instead of comparing ``connection.vendor`` (no database)."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "schemaless_store"
# ``vendor == "mysql"``, ``conn.vendor != "mysql"``, ``shards.vendor(alias) == ...``
COMPARISON = re.compile(r"vendor(\([^)]*\))?\s*[!=]=|[!=]=\s*\S*vendor\b")
# config/server_support checks each new connection's server, below the sql layer that holds the
# dialects: it refuses what is not MariaDB before any dialect is asked.
ALLOWED = {"config/server_support.py": 1}


def comparisons(text: str) -> int:
    return len(COMPARISON.findall(text))


def test_a_vendor_comparison_is_found():
    assert comparisons('if conn.vendor == "mysql":') == 1
    assert comparisons('x = shards.vendor(alias) != "mysql"') == 1
    assert comparisons('if "sqlite" == conn.vendor:') == 1
    assert comparisons("dialects.of(conn).fence_by_kill") == 0


def test_no_module_branches_on_the_vendor():
    found = {
        path.relative_to(PACKAGE).as_posix(): comparisons(path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    found = {name: count for name, count in found.items() if count}
    assert found == ALLOWED, (
        "ask the backend's dialect (schemaless_store.sql.dialects) instead: "
        f"{ {n: c for n, c in found.items() if ALLOWED.get(n) != c} }"
    )
    assert sum(found.values()) <= 15

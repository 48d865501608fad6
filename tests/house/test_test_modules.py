"""The tests keep the package's shape rule (docs/architecture.md): no test module over 450
lines; a longer one is split by what it tests, and what its parts share goes to tests/support/
(no database)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MAX_LINES = 450


def test_no_test_module_is_over_450_lines():
    long = {
        path.relative_to(TESTS).as_posix(): lines
        for path in sorted(TESTS.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these by what they test: {long}"

"""scripts/reliability_table.py renders the suite's JSON lines as docs/reliability.md's table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "reliability_table.py"), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_rows_of_a_class_and_backend_are_added_up(tmp_path):
    report = tmp_path / "report.jsonl"
    rows = [
        {"fault": "kill", "backend": "mariadb", "cases": 200, "data_lost": 0, "wrong_results": 0},
        {"fault": "kill", "backend": "mariadb", "cases": 200, "data_lost": 1, "wrong_results": 0},
        {"fault": "kill", "backend": "sqlite", "cases": 50, "data_lost": 0, "wrong_results": 2},
    ]
    report.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    done = run(str(report))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("| fault or input class | backend | cases run")
    assert lines[2:] == ["| kill | mariadb | 400 | 1 | 0 |", "| kill | sqlite | 50 | 0 | 2 |"]


def test_a_broken_report_is_a_clear_error(tmp_path):
    report = tmp_path / "report.jsonl"
    report.write_text('{"fault": "kill"}\n')
    done = run(str(report))
    assert done.returncode != 0 and "missing" in done.stderr

"""`scripts/reliability_table.py` turns the reliability report into the table of reliability.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reliability_table.py"


def run(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def write_lines(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def row(fault: str, backend: str, cases: int, lost: int = 0, wrong: int = 0, **details) -> dict:
    return {
        "fault": fault,
        "backend": backend,
        "cases": cases,
        "data_lost": lost,
        "wrong_results": wrong,
        **details,
    }


def test_a_failed_class_shows_its_counts_and_other_failures(tmp_path):
    report = write_lines(
        tmp_path / "report.jsonl",
        [
            row("Codec fuzz", "sqlite", 100, failures=0),
            row("SIGKILL of a writer", "sqlite", 7, lost=2, wrong=3, failures=1),
            row("SIGKILL of a writer", "sqlite", 20, failures=1),  # another run, failing too
            row("Older row", "mariadb", 4),  # written before rows had "failures"
        ],
    )

    result = run(report)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2:] == [
        "| Codec fuzz | sqlite | 100 | 0 | 0 |",
        "| SIGKILL of a writer (2 other failures) | sqlite | 27 | 2 | 3 |",
        "| Older row | mariadb | 4 | 0 | 0 |",
    ]
    negative = write_lines(tmp_path / "negative.jsonl", [row("x", "sqlite", 1, failures=-1)])
    assert "failures is not a count" in run(negative).stderr


def test_renders_a_markdown_table_adding_up_repeated_rows(tmp_path):
    first = write_lines(
        tmp_path / "sqlite.jsonl",
        [
            row("SIGKILL of a writer", "sqlite", 20, layouts={"a": 1}),
            row("Codec fuzz", "sqlite", 100),
            row("SIGKILL of a writer", "sqlite", 5, lost=1),  # a second run, appended
        ],
    )
    second = write_lines(
        tmp_path / "mariadb.jsonl",
        [row("Codec fuzz", "mariadb", 100, wrong=2), row("Pipe | in name", "mariadb", 3)],
    )
    (tmp_path / "sqlite.jsonl").write_text(first.read_text() + "\n", encoding="utf-8")

    result = run(first, second)

    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "| Fault or input class | Backend | Cases run | Data lost | Wrong results |\n"
        "|---|---|---:|---:|---:|\n"
        "| SIGKILL of a writer | sqlite | 25 | 1 | 0 |\n"
        "| Codec fuzz | sqlite | 100 | 0 | 0 |\n"
        "| Codec fuzz | mariadb | 100 | 0 | 2 |\n"
        "| Pipe \\| in name | mariadb | 3 | 0 | 0 |\n"
    )


def test_a_bad_line_is_named_and_fails(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row("ok", "sqlite", 1)) + "\n{not json\n", encoding="utf-8")
    result = run(bad)
    assert result.returncode == 1
    assert f"{bad}:2: not JSON" in result.stderr and result.stdout == ""

    negative = write_lines(tmp_path / "negative.jsonl", [row("x", "sqlite", -1)])
    assert "cases is not a count" in run(negative).stderr

    missing = write_lines(tmp_path / "missing.jsonl", [{"fault": "x", "backend": "sqlite"}])
    assert "missing cases, data_lost, wrong_results" in run(missing).stderr


def test_an_empty_report_fails(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    result = run(empty)
    assert result.returncode == 1 and "empty" in result.stderr

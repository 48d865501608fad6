"""``tests/support/reliability_report.recording``: a class's row is recorded, with what it
counted, even when the class fails, and only then does the test fail."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from tests.support.reliability_report import recording


@pytest.fixture
def report(tmp_path, monkeypatch):
    path = tmp_path / "report.jsonl"
    monkeypatch.setenv("SCHEMALESS_RELIABILITY_REPORT", str(path))

    def rows() -> list[dict]:
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    return rows


def test_a_clean_class_records_its_row_and_passes(report):
    with recording("Clean class", seed=3) as tally:
        tally.cases = 5
        assert tally.expect(True, "never counted")

    assert report() == [
        {
            "fault": "Clean class",
            "backend": settings.BACKEND,
            "cases": 5,
            "data_lost": 0,
            "wrong_results": 0,
            "failures": 0,
            "seed": 3,
        }
    ]


def test_counted_problems_are_recorded_then_fail_the_test(report):
    with pytest.raises(pytest.fail.Exception) as failed, recording("Lossy class") as tally:
        tally.cases = 4
        tally.lost("entity 1 is gone")
        tally.expect(False, "entity 2 is stale", "lost")
        tally.wrong("a query found 3", count=2)
        tally.fail("the cleaner pass failed")
        tally.cases += 1  # the class goes on measuring after a problem

    (row,) = report()
    assert (row["cases"], row["data_lost"], row["wrong_results"], row["failures"]) == (5, 2, 2, 1)
    assert row["problems"] == [
        "data lost: entity 1 is gone",
        "data lost: entity 2 is stale",
        "wrong result: a query found 3",
        "failure: the cleaner pass failed",
    ]
    message = str(failed.value)
    assert "Lossy class: 2 data lost, 2 wrong results, 1 other failures in 5 cases" in message
    assert "entity 1 is gone" in message


def test_an_exception_escaping_the_class_is_recorded_as_a_failure_and_propagates(report):
    with (
        pytest.raises(AssertionError, match="a plain assert"),
        recording("Broken class") as tally,
    ):
        tally.cases = 2
        tally.wrong("measured before the assert")
        raise AssertionError("a plain assert")

    (row,) = report()
    assert (row["cases"], row["data_lost"], row["wrong_results"], row["failures"]) == (2, 0, 1, 1)
    assert row["problems"][-1] == "failure: AssertionError: a plain assert"


def test_a_skipped_class_records_nothing(report):
    with pytest.raises(pytest.skip.Exception), recording("Skipped class"):
        pytest.skip("not here")
    assert report() == []


def test_refuses_counts_anything_but_the_expected_error_as_a_wrong_result(report):
    def raises(exc):
        def call():
            raise exc

        return call

    with pytest.raises(pytest.fail.Exception), recording("Refusals") as tally:
        assert tally.refuses(ValueError, raises(ValueError("bad id 7")), "ok", match="id 7")
        assert not tally.refuses(ValueError, lambda: 1, "accepted")
        assert not tally.refuses(ValueError, raises(KeyError("k")), "another error")
        assert not tally.refuses(ValueError, raises(ValueError("other")), "text", match="id 7")

    (row,) = report()
    assert row["wrong_results"] == 3
    assert row["problems"] == [
        "wrong result: accepted: accepted",
        "wrong result: another error: raised KeyError: 'k'",
        "wrong result: text: ValueError without 'id 7': other",
    ]


def test_no_report_file_still_fails_a_failing_class(monkeypatch):
    monkeypatch.delenv("SCHEMALESS_RELIABILITY_REPORT", raising=False)
    with pytest.raises(pytest.fail.Exception), recording("Unreported") as tally:
        tally.lost("gone")

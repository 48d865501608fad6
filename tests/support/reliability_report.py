"""The reliability suite's record of what it ran: one row per fault or input class.

When ``SCHEMALESS_RELIABILITY_REPORT`` names a file, each row is appended to it as one JSON line
(``scripts/reliability_table.py`` renders them as the table in ``docs/reliability.md``).

A class measures inside ``with recording(fault) as tally:``. Its checks count what they find
instead of raising: ``tally.lost(...)`` for data lost (an acknowledged write not stored, a row
gone), ``tally.wrong(...)`` for a wrong result (a non-matching entity returned, a committed one
not found, a bad value accepted, an index left inexact), ``tally.fail(...)`` for any other
problem. When the block ends, passed or failed, the row is recorded with those counts, and only
then does the test fail, listing the problems. An exception that escapes the block (a plain
``assert`` in it, or an error nobody expected) is counted as one other failure of the row
before it propagates. So a failing class shows in the table: its data lost and wrong results,
and its other failures next to its name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

# Problems kept in a row (all are counted) and listed when the test fails.
SHOWN = 10


def record(
    fault: str, cases: int, data_lost: int, wrong_results: int, failures: int = 0, **details: object
) -> None:
    """Append one row to the report, if one is being written."""
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
        "failures": failures,
        **details,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(row, default=str) + "\n")


class Tally:
    """The counts of one class while it runs (see :func:`recording`)."""

    def __init__(self, fault: str, **details: object) -> None:
        self.fault = fault
        self.cases = 0
        self.data_lost = 0
        self.wrong_results = 0
        self.failures = 0  # problems that are neither data lost nor a wrong result
        self.details: dict[str, object] = dict(details)
        self.problems: list[str] = []

    def _note(self, kind: str, problem: str) -> None:
        self.problems.append(f"{kind}: {problem}")

    def lost(self, problem: str, count: int = 1) -> None:
        self.data_lost += count
        self._note("data lost", problem)

    def wrong(self, problem: str, count: int = 1) -> None:
        self.wrong_results += count
        self._note("wrong result", problem)

    def fail(self, problem: str) -> None:
        self.failures += 1
        self._note("failure", problem)

    def wrong_each(self, problems: Iterable[str]) -> None:
        """One wrong result per problem (e.g. what an invariant check returned)."""
        for problem in problems:
            self.wrong(problem)

    def expect(self, ok: bool, problem: str, kind: str = "wrong") -> bool:
        """Count ``problem`` (as ``kind``: "lost", "wrong" or "fail") unless ``ok``."""
        if not ok:
            {"lost": self.lost, "wrong": self.wrong, "fail": self.fail}[kind](problem)
        return ok

    def refuses(
        self,
        errors: type[BaseException] | tuple[type[BaseException], ...],
        call: Callable[[], Any],
        what: str,
        match: str | None = None,
    ) -> bool:
        """``call()`` must raise one of ``errors`` (with ``match`` in its text): anything else,
        a value returned or another exception, is a wrong result."""
        try:
            call()
        except errors as exc:
            if match is None or re.search(match, str(exc)):
                return True
            self.wrong(f"{what}: {type(exc).__name__} without {match!r}: {exc}")
        except Exception as exc:
            self.wrong(f"{what}: raised {type(exc).__name__}: {exc}")
        else:
            self.wrong(f"{what}: accepted")
        return False

    @property
    def clean(self) -> bool:
        return not self.problems

    def save(self) -> None:
        details = dict(self.details)
        if self.problems:
            details["problems"] = self.problems[:SHOWN]
        record(
            self.fault,
            self.cases,
            self.data_lost,
            self.wrong_results,
            self.failures,
            **details,
        )

    def verify(self) -> None:
        if self.problems:
            more = len(self.problems) - SHOWN
            shown = "\n  ".join(self.problems[:SHOWN]) + (
                f"\n  ... and {more} more" if more > 0 else ""
            )
            pytest.fail(
                f"{self.fault}: {self.data_lost} data lost, {self.wrong_results} wrong results, "
                f"{self.failures} other failures in {self.cases} cases:\n  {shown}",
                pytrace=False,
            )


@contextlib.contextmanager
def recording(fault: str, **details: object) -> Iterator[Tally]:
    """Measure one class in the block; record its row when the block ends, then fail the test
    if it counted any problem. An exception escaping the block is counted as a failure, recorded,
    and propagates."""
    tally = Tally(fault, **details)
    try:
        yield tally
    # Not caught: a skip (the class ran nothing) or an interrupted run (Ctrl-C): no row.
    except (Exception, pytest.fail.Exception) as exc:
        text = " ".join(str(exc).split())
        tally.fail(f"{type(exc).__name__}: {text[:500]}" if text else type(exc).__name__)
        tally.save()
        raise
    tally.save()
    tally.verify()

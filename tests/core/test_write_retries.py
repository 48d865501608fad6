"""Bounded retries after a deadlock or lock wait timeout (``retries.with_retries``), issue 8."""

from __future__ import annotations

import pytest
from django.db import OperationalError, transaction
from django.test import override_settings

from schemaless_store.topology import retries
from tests.support import STORE

pytestmark = STORE


class Deadlocking:
    """An operation that deadlocks ``failures`` times, then returns ``"done"``."""

    def __init__(self, failures: int, code: int = 1213) -> None:
        self.failures = failures
        self.code = code
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise OperationalError(self.code, "Deadlock found when trying to get lock")
        return "done"


@pytest.mark.parametrize("code", [1213, 1205])
def test_a_deadlock_or_lock_wait_timeout_is_retried_and_counted(code):
    before = retries.retries_made()
    operation = Deadlocking(3, code)
    assert retries.with_retries(operation, "shard_0") == "done"
    assert operation.calls == 4
    assert retries.retries_made() - before == 3


def test_retries_are_bounded_by_the_setting():
    with override_settings(SCHEMALESS={"BUCKETS": 4096, "WRITE_RETRIES": 2}):
        operation = Deadlocking(5)
        with pytest.raises(OperationalError):
            retries.with_retries(operation, "shard_0")
        assert operation.calls == 3


def test_other_errors_are_not_retried():
    calls = []

    def broken() -> None:
        calls.append(1)
        raise OperationalError(1146, "Table doesn't exist")

    with pytest.raises(OperationalError):
        retries.with_retries(broken, "shard_0")
    assert len(calls) == 1


def test_inside_a_callers_transaction_the_deadlock_reaches_the_caller():
    operation = Deadlocking(1)
    with pytest.raises(OperationalError), transaction.atomic(using="shard_0"):
        retries.with_retries(operation, "shard_0")
    assert operation.calls == 1
    other = Deadlocking(1)  # a transaction on another shard does not stop retries on this one
    with transaction.atomic(using="shard_1"):
        assert retries.with_retries(other, "shard_0") == "done"
    assert other.calls == 2

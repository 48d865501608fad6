"""``commit_batch`` reads its answers with the driver's own calls (issue 45, item 5). An
interrupt as its round trip returns (``KeyboardInterrupt``, a signal handler's exception)
leaves the batch's later answers unread, its ``COMMIT``'s among them: they are read before the
interrupt goes on, as closing a cursor does, so the batch has ended on the server before the
write undoes or invalidates anything; a session that cannot be read to its end is closed. A
statement's own error ends the batch with nothing left to read. No database is touched (a
driver that keeps the protocol's state, as libmariadb does)."""

from __future__ import annotations

import pytest

from schemaless_store.tables import receipts


class DriverError(Exception):
    pass


class Driver:
    """Answers each statement of a query in turn; ``fail_at``: that statement's answer is a
    server error (no answers after it); ``interrupt``: the query call raises as it returns."""

    Error = DriverError

    def __init__(
        self, *, fail_at: int | None = None, interrupt: bool = False, again: bool = False
    ) -> None:
        self.fail_at, self.interrupt, self.again = fail_at, interrupt, again
        self.unread: list[int] = []
        self.closed = False

    def literal(self, value: object) -> bytes:
        return repr(value).encode()

    def query(self, sql: bytes) -> None:
        assert not self.closed
        if self.unread:
            raise DriverError("2014 Commands out of sync")
        count = len(sql.split(b";"))
        self.unread = list(range(count if self.fail_at is None else self.fail_at + 1))
        if self.interrupt:
            raise KeyboardInterrupt()

    def store_result(self) -> None:
        return None

    def insert_id(self) -> int:
        return 0

    def affected_rows(self) -> int:
        return 1

    def next_result(self) -> int:
        if self.again:  # interrupted again while the rest is read
            raise KeyboardInterrupt()
        self.unread.pop(0)
        if self.fail_at is not None and self.unread == [self.fail_at]:
            self.unread = []
            raise DriverError("1062 Duplicate entry")
        return 0 if self.unread else -1

    def close(self) -> None:
        self.closed = True


def batch(driver: Driver) -> list[tuple[int, int, tuple[object, ...]]]:
    return receipts.commit_batch(
        driver, [b"UPDATE a", b"UPDATE b"], (b"\x01" * 16, 1, {"n": 1}), begin=True
    )


def test_every_statement_is_answered():
    driver = Driver()
    assert batch(driver) == [(0, 1, ()), (0, 1, ())]
    assert driver.unread == [] and not driver.closed


def test_a_statements_error_ends_the_batch_and_keeps_the_session():
    driver = Driver(fail_at=3)
    with pytest.raises(DriverError, match="1062"):
        batch(driver)
    assert driver.unread == [] and not driver.closed


def test_an_interrupt_as_the_round_trip_returns_reads_the_rest_first():
    driver = Driver(interrupt=True)
    with pytest.raises(KeyboardInterrupt):
        batch(driver)
    assert driver.unread == [], "the COMMIT's answer left unread: the outcome not settled"
    assert not driver.closed


def test_a_session_that_cannot_be_read_to_its_end_is_closed():
    driver = Driver(interrupt=True)
    driver.again = True
    with pytest.raises(KeyboardInterrupt):
        batch(driver)
    assert driver.closed, "answers left unread on a session that stays open: out of sync"

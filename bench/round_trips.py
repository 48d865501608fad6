"""Round trips counted in the client: every ``query()`` of a mysqlclient connection is one, and
so are the C-level ``autocommit()``/``commit()``/``rollback()`` calls Django's transactions make.
``bench.profile`` lists them per op; the netem leg counts them per op, ours and raw."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# Connection methods that talk to the server. (``autocommit(on)`` is skipped by the client when
# the server already is in that mode; it is counted here either way.)
ROUND_TRIPS = ("query", "autocommit", "commit", "rollback")


@contextmanager
def statements() -> Iterator[list[str]]:
    """Every round trip of any mysqlclient connection while the block runs: statements, and the
    C-level ``autocommit()``/``commit()``/``rollback()`` calls Django's transactions make."""
    from MySQLdb.connections import Connection

    sent: list[str] = []
    originals = {name: getattr(Connection, name) for name in ROUND_TRIPS}

    def spy(name: str) -> Callable[..., Any]:
        original = originals[name]

        def call(self: Any, *args: Any) -> Any:
            if name == "query":
                sql = args[0]
                sent.append(
                    sql.decode(errors="replace") if isinstance(sql, bytes | bytearray) else str(sql)
                )
            elif name == "autocommit":
                sent.append(f"SET autocommit={int(args[0])}  (Connection.autocommit)")
            else:
                sent.append(f"{name.upper()}  (Connection.{name})")
            return original(self, *args)

        return call

    for name in ROUND_TRIPS:
        setattr(Connection, name, spy(name))
    try:
        yield sent
    finally:
        for name, original in originals.items():
            setattr(Connection, name, original)

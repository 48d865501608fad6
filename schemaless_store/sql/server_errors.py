"""The MariaDB (and MySQL client) error numbers the store acts on, named once.

The driver raises them as ``exc.args[0]``; :func:`code_of` reads it from any exception.
"""

from __future__ import annotations

# Server errors.
ER_PARSE_ERROR = 1064  # also a table's trigger that failed to load: tables/trigger_reload.py
ER_NO_SUCH_THREAD = 1094  # KILL of a session that ended meanwhile: "Unknown thread id"
ER_NO_SUCH_TABLE = 1146
ER_UNKNOWN_SYSTEM_VARIABLE = 1193  # no such variable: a server without Galera's
ER_LOCK_WAIT_TIMEOUT = 1205  # also an ALTER's ``WAIT n`` running out on its metadata lock
ER_LOCK_DEADLOCK = 1213  # also a Galera certification failure at COMMIT
ER_OPTION_PREVENTS_STATEMENT = 1290  # a write to a read-only replica
ER_CONNECTION_KILLED = 1927
ER_CLIENT_INTERACTION_TIMEOUT = 4031

# Client errors (libmariadb).
CR_CONNECTION_ERROR = 2002
CR_CONN_HOST_ERROR = 2003
CR_UNKNOWN_HOST = 2005
CR_SERVER_GONE_ERROR = 2006
CR_SERVER_LOST = 2013
CR_SERVER_LOST_EXTENDED = 2055

# "Try the transaction again": it was rolled back whole.
RETRYABLE = frozenset({ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK})
# "The server is not there": a connection refused, or an open one gone.
CONNECTION_LOST = frozenset(
    {
        CR_CONNECTION_ERROR,
        CR_CONN_HOST_ERROR,
        CR_UNKNOWN_HOST,
        CR_SERVER_GONE_ERROR,
        CR_SERVER_LOST,
        CR_SERVER_LOST_EXTENDED,
        ER_CONNECTION_KILLED,
        ER_CLIENT_INTERACTION_TIMEOUT,
    }
)
# ... of those, the ones where an open connection went away (killed by a move's fence, the
# server restarted or failed over), rather than a new one refused.
OPEN_CONNECTION_LOST = CONNECTION_LOST - {CR_CONNECTION_ERROR, CR_CONN_HOST_ERROR, CR_UNKNOWN_HOST}


def code_of(exc: BaseException) -> int | None:
    """The server's or client's error number of ``exc``, if it carries one."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None


def broken_trigger(exc: BaseException) -> bool:
    """MariaDB's "Trigger 'name' has an error in its body" (or "Unknown trigger has ..."): a
    statement on a table whose cached triggers failed to load (tables/trigger_reload.py)."""
    return code_of(exc) == ER_PARSE_ERROR and "has an error in its body" in str(exc)


def no_table(exc: BaseException) -> bool:
    """MariaDB's "no such table", or SQLite's."""
    return code_of(exc) == ER_NO_SUCH_TABLE or "no such table" in str(exc)

"""The plan test's machinery (tests/queries/test_captured_plans.py): every statement the store
sends to a shard is captured at the driver, cut into single statements, reduced to its shape,
and ``EXPLAIN``-ed (with the values it was sent with) against copies of the shard's tables
grown to tens of thousands of rows, so that a scan shows.

- :class:`Capture`: wraps mysqlclient's ``Connection.query``, which every cursor's
  ``execute`` and ``executemany`` ends in, and which the store's own driver calls use (its
  reads and its commit batches, without a cursor): the bytes the server gets. It notes which
  database each connection was opened on.
- :func:`statements` cuts a multi-statement query at its ``;`` (outside quotes);
  :func:`shape` replaces literals with ``?`` and lists with one or many members (``(?)``,
  ``(?+)``, ``(...), …``): one tuple and several stay apart, since MariaDB plans them apart.
- :func:`grown_copy` copies a shard's database (its rows, then generated rows up to
  :data:`ROWS` per table, ``ANALYZE``-d) into ``plans_<db>`` on the same server.
- :func:`judge` reads one statement's ``EXPLAIN``: a full scan (``ALL``, or an ``index`` scan
  without a ``LIMIT``), or a key other than the one its conditions name.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import MySQLdb
from MySQLdb import connections as driver_connections
from MySQLdb import cursors as driver_cursors

ROWS = 30_000  # each table of the copy holds at least this many rows

_TOKEN = re.compile(
    rb"""(?P<str>(?:_binary|_utf8mb4|_latin1|[nN])?'(?:[^'\\]|\\.|'')*')
    |(?P<hex>[xX]'[0-9a-fA-F]*'|0x[0-9a-fA-F]+)
    |(?P<quoted>`[^`]*`)
    |(?P<word>[A-Za-z_@][A-Za-z0-9_$@]*)
    |(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
    |(?P<semi>;)
    |(?P<space>\s+)
    |(?P<other>.)""",
    re.X | re.S,
)


def statements(query: bytes) -> list[bytes]:
    """The statements of a (multi-statement) query, each stripped, empty ones dropped."""
    out, start = [], 0
    for match in _TOKEN.finditer(query):
        if match.lastgroup == "semi":
            out.append(query[start : match.start()].strip())
            start = match.end()
    out.append(query[start:].strip())
    return [s for s in out if s]


_ONE_OR_MANY = re.compile(r"\?(?:\s*,\s*\?)+")
_GROUPS = re.compile(r"(\(\?\+?\))(?:\s*,\s*\1)+")
_GROUP_LISTS = re.compile(r"(\(\(\?\+?\), …\))")


def shape(statement: bytes) -> str:
    """``statement`` with every literal a ``?``, a list of several values ``?+``, a list of
    several equal groups ``(...), …``; whitespace collapsed. One value (``(?)``) and one
    tuple (``((?+))``) keep their own shapes."""
    parts = []
    for match in _TOKEN.finditer(statement):
        kind = match.lastgroup
        if kind in ("str", "hex", "num"):
            parts.append("?")
        elif kind == "space":
            parts.append(" ")
        else:
            parts.append(match.group().decode("utf-8", "replace"))
    text = re.sub(r"\s+", " ", "".join(parts)).strip()
    text = re.sub(r"\(\s*", "(", re.sub(r"\s*\)", ")", text))
    text = _ONE_OR_MANY.sub("?+", text)
    return _GROUPS.sub(r"\1, …", text)


def verb(statement: str) -> str:
    return statement.split(None, 1)[0].upper() if statement else ""


@dataclass
class Sent:
    """One statement shape as sent: its database, where in the store it was first sent from
    (and ``senders``: every place that sent it), and the first few statements of that shape
    (with their values)."""

    db: str
    origin: str
    count: int = 1
    samples: list[bytes] = field(default_factory=list)
    senders: set[str] = field(default_factory=set)


_DROP = re.compile(rb"^DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(.+)$", re.I | re.S)


# Modules that run any statement for their callers: the origin is the caller.
_RUNNERS = ("topology.shards", "topology.retries")


def origin() -> str | None:
    """``module.function`` of the innermost frame of the store (``schemaless_store``; not
    the modules that run statements for others), or
    None when a test's own code sent the statement (its raw looks at the shards)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if f"{os.sep}schemaless_store{os.sep}" in name:
            module = frame.f_globals.get("__name__", "?").replace("schemaless_store.", "")
            if module not in _RUNNERS:
                return f"{module}.{frame.f_code.co_name}"
        if f"{os.sep}tests{os.sep}" in name:
            return None
        frame = frame.f_back  # type: ignore[assignment]
    return None


class Capture:
    """While open, every statement the store sends on a connection opened meanwhile is
    recorded by database and shape (``shapes``); the tests' own statements are not. Before a
    ``DROP TABLE`` runs, the table's definition is kept (``dropped``: db -> table -> its
    ``CREATE TABLE``), so that the plans can be read after the workload dropped it (a new
    index's tables, a move's log). Connections open before are not seen: close them first."""

    SAMPLES = 4

    def __init__(self) -> None:
        self.shapes: dict[str, Sent] = {}
        self.dropped: dict[str, dict[str, str]] = {}
        self.lock = threading.Lock()
        self.quiet = threading.local()

    def __enter__(self) -> Capture:
        capture = self
        self._init = driver_connections.Connection.__init__
        self._query = driver_connections.Connection.query
        original_init, original_query = self._init, self._query

        def init(conn: Any, *args: Any, **kwargs: Any) -> None:
            original_init(conn, *args, **kwargs)
            conn._plans_db = kwargs.get("database") or kwargs.get("db") or ""
            conn._plans_args = kwargs

        def query(db: Any, q: Any) -> Any:
            if not getattr(capture.quiet, "on", False):
                sent = bytes(q) if isinstance(q, bytes | bytearray) else str(q).encode()
                where = origin()
                if where is not None:
                    capture.record(getattr(db, "_plans_db", ""), where, sent)
                capture.keep_definitions(db, sent)
            return original_query(db, q)

        driver_connections.Connection.__init__ = init  # type: ignore[method-assign]
        driver_connections.Connection.query = query  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        driver_connections.Connection.__init__ = self._init  # type: ignore[method-assign]
        driver_connections.Connection.query = self._query  # type: ignore[method-assign]

    def record(self, db: str, where: str, query: bytes) -> None:
        for statement in statements(query):
            key = f"{db}: {shape(statement)}"
            with self.lock:
                found = self.shapes.get(key)
                if found is None:
                    self.shapes[key] = Sent(db, where, samples=[statement], senders={where})
                else:
                    found.count += 1
                    found.senders.add(where)
                    if len(found.samples) < self.SAMPLES:
                        found.samples.append(statement)

    def keep_definitions(self, conn: Any, query: bytes) -> None:
        """The definition of each table a ``DROP TABLE`` in ``query`` names, read on a
        connection of its own."""
        args = getattr(conn, "_plans_args", None)
        drops = [m.group(1) for s in statements(query) if (m := _DROP.match(s))]
        if not drops or args is None:
            return
        self.quiet.on = True
        try:
            side = MySQLdb.connect(**args)
            try:
                cursor = side.cursor()
                for names in drops:
                    for name in names.decode().split(","):
                        table = name.strip().strip("`")
                        try:
                            cursor.execute(f"SHOW CREATE TABLE `{table}`")
                        except MySQLdb.Error:
                            continue  # IF EXISTS, and it did not
                        definition = cursor.fetchone()[1]
                        with self.lock:
                            self.dropped.setdefault(conn._plans_db, {})[table] = definition
            finally:
                side.close()
        finally:
            self.quiet.on = False


# --- the grown copy ---------------------------------------------------------------------------


def _filler(table: str, column: dict[str, Any]) -> str | None:
    """A SQL expression of ``seq`` for a generated row's column, or None to leave its
    default (auto-increment and generated columns, types without a rule)."""
    kind, length = column["DATA_TYPE"], column["CHARACTER_MAXIMUM_LENGTH"] or 64
    salt = f"'{table}.{column['COLUMN_NAME']}'"
    if "auto_increment" in column["EXTRA"] or "GENERATED" in column["EXTRA"].upper():
        return None
    if kind in ("tinyint", "smallint"):
        return "seq % 100"
    if kind in ("mediumint", "int", "bigint"):
        return "1700000000 + seq"
    if kind in ("double", "float", "decimal"):
        return "seq / 3"
    if kind in ("binary", "varbinary"):
        return f"LEFT(UNHEX(SHA2(CONCAT(seq, {salt}), 256)), {min(length, 32)})"
    if kind in ("char", "varchar"):
        return f"LEFT(SHA2(CONCAT(seq, {salt}), 256), {min(length, 64)})"
    if kind in ("blob", "mediumblob", "longblob", "text", "mediumtext", "longtext"):
        return f"UNHEX(SHA2(CONCAT(seq, {salt}), 256))"
    if kind in ("datetime", "timestamp"):
        return "NOW(6) - INTERVAL seq SECOND"
    return None


def grown_copy(conn: Any, db: str, dropped: dict[str, str], rows: int = ROWS) -> str:
    """``plans_<db>``: every base table of ``db``, and the ``dropped`` ones from their
    definitions, with their rows and then generated rows up to ``rows`` (``INSERT IGNORE``:
    a duplicate key is skipped), analysed. Returns its name."""
    copy = f"plans_{db}"
    cursor = conn.cursor(driver_cursors.DictCursor)
    cursor.execute(f"DROP DATABASE IF EXISTS `{copy}`")
    cursor.execute(f"CREATE DATABASE `{copy}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    cursor.execute(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
        "AND TABLE_TYPE = 'BASE TABLE'",
        [db],
    )
    tables = [r["TABLE_NAME"] for r in cursor.fetchall()]
    for table in tables:
        cursor.execute(f"CREATE TABLE `{copy}`.`{table}` LIKE `{db}`.`{table}`")
        cursor.execute(f"INSERT INTO `{copy}`.`{table}` SELECT * FROM `{db}`.`{table}`")
    conn.select_db(copy)
    for table, definition in dropped.items():
        if table not in tables:
            cursor.execute(definition)
            tables.append(table)
    conn.select_db(db)
    for table in tables:
        cursor.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, EXTRA "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            [copy, table],
        )
        filled = [(c["COLUMN_NAME"], _filler(table, c)) for c in cursor.fetchall()]
        names = ", ".join(f"`{name}`" for name, value in filled if value is not None)
        values = ", ".join(value for _name, value in filled if value is not None)
        cursor.execute(
            f"INSERT IGNORE INTO `{copy}`.`{table}` ({names}) SELECT {values} FROM seq_1_to_{rows}"
        )
        cursor.execute(f"ANALYZE TABLE `{copy}`.`{table}` PERSISTENT FOR ALL")
        cursor.fetchall()
    conn.commit()
    return copy


def keys_of(conn: Any, db: str) -> dict[str, dict[str, list[str]]]:
    """Each table's keys: table -> key name -> its columns in order."""
    cursor = conn.cursor()
    cursor.execute(
        "SELECT TABLE_NAME, INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = %s ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
        [db],
    )
    found: dict[str, dict[str, list[str]]] = {}
    for table, key, column in cursor.fetchall():
        found.setdefault(table, {}).setdefault(key, []).append(column)
    return found


def explain(conn: Any, statement: bytes) -> list[dict[str, Any]]:
    cursor = conn.cursor(driver_cursors.DictCursor)
    try:
        cursor.execute(b"EXPLAIN " + statement)
        return list(cursor.fetchall())
    finally:
        cursor.close()


# --- judging a plan ---------------------------------------------------------------------------

_WORD = r"`?([A-Za-z_][A-Za-z0-9_]*)`?"
_COLUMN = rf"(?:{_WORD}\.)?{_WORD}"
_COMPARED = re.compile(rf"{_COLUMN}\s*(?:=|<=>|>=|<=|<|>|\bIN\b|\bBETWEEN\b|\bIS\b)", re.I)
_COMPARED_TO = re.compile(rf"(?:=|<=>|>=|<=|<|>)\s*{_COLUMN}", re.I)
_ROW = re.compile(r"\(([\w`.,\s]+)\)\s*(?:=|>=|<=|<|>|\bIN\b)", re.I)
_ORDER = re.compile(rf"\bORDER BY\s+{_COLUMN}", re.I)
_TABLES = re.compile(
    rf"\b(?:FROM|JOIN|UPDATE|INTO)\s+{_WORD}(?:\s+(?:AS\s+)?(?!WHERE|SET|ON|JOIN|USING|"
    rf"ORDER|LIMIT|GROUP|FORCE|USE|IGNORE|LEFT|INNER|STRAIGHT_JOIN|VALUES|SELECT|FOR|LOCK)"
    rf"{_WORD})?",
    re.I,
)
_KEYWORDS = {"NULL", "NOT", "AND", "OR", "SELECT", "TRUE", "FALSE"}


def constrained(shape_text: str) -> set[str]:
    """Columns that a condition of the statement (its ``ON`` and ``WHERE``, not its ``SET``)
    compares, with either side a column."""
    where = re.search(r"\b(?:WHERE|ON)\b", shape_text, re.I)
    text = shape_text[where.start() :] if where else ""
    found = {m.group(2) for m in _COMPARED.finditer(text)}
    found |= {m.group(2) for m in _COMPARED_TO.finditer(text)}
    for row in _ROW.finditer(text):
        found |= {part.strip(" `").split(".")[-1].strip("`") for part in row.group(1).split(",")}
    return {c for c in found if c.upper() not in _KEYWORDS}


def aliases(shape_text: str) -> dict[str, str]:
    """Alias (or name) -> table, for the tables the statement names."""
    found = {}
    for match in _TABLES.finditer(shape_text):
        found[match.group(2) or match.group(1)] = match.group(1)
        found[match.group(1)] = match.group(1)
    return found


def meant_keys(shape_text: str, keys: dict[str, list[str]]) -> set[str]:
    """The keys of a table that serve the statement best: the longest run of leading columns
    that its conditions compare; with none, those led by its first ``ORDER BY`` column."""
    columns = constrained(shape_text)
    runs = {}
    for name, key_columns in keys.items():
        run = 0
        for column in key_columns:
            if column not in columns:
                break
            run += 1
        runs[name] = run
    best = max(runs.values(), default=0)
    if best:
        return {name for name, run in runs.items() if run == best}
    order = _ORDER.search(shape_text)
    if order:
        return {name for name, cols in keys.items() if cols[0] == order.group(2)}
    return set()


@dataclass
class Verdict:
    """One sample of a shape: its plan, what is wrong with it, where the store sent it from."""

    shape: str
    rows: list[dict[str, Any]]
    problems: list[str]
    origin: str = ""


def judge(
    shape_text: str, rows: list[dict[str, Any]], keys: dict[str, dict[str, list[str]]]
) -> list[str]:
    """What is wrong with a plan: each row's full scan, or key other than the one meant."""
    tables = aliases(shape_text)
    problems = []
    limited = re.search(r"\bLIMIT\b", shape_text, re.I) is not None
    for row in rows:
        table = tables.get(row["table"] or "", row["table"])
        if table not in keys:  # <derived2>, <subquery3>, no table, a table of the server's
            continue
        if row["type"] == "ALL":
            problems.append(f"{table}: full scan (possible keys: {row['possible_keys']})")
            continue
        if row["type"] == "index" and not limited:
            problems.append(f"{table}: full index scan of {row['key']}, no LIMIT")
            continue
        meant = meant_keys(shape_text, keys[table])
        if meant and row["key"] not in meant and row["type"] not in ("system", None):
            problems.append(f"{table}: key {row['key']}, meant {sorted(meant)}")
    return problems


def judged(
    conn: Any, sent: Sent, shape_text: str, keys: dict[str, dict[str, list[str]]]
) -> Iterator[Verdict]:
    """Each sample of ``sent``, explained on ``conn`` (in the grown copy) and judged."""
    for sample in sent.samples:
        try:
            rows = explain(conn, sample)
        except MySQLdb.Error as exc:
            yield Verdict(shape_text, [], [f"EXPLAIN failed: {exc}"], sent.origin)
            continue
        yield Verdict(shape_text, rows, judge(shape_text, rows, keys), sent.origin)

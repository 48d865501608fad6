"""No statement the store sends scans what a key finds (issue 45, item 0).

While a workload runs every path of the store (tests/support/plan_workload.py: writes, reads,
pages, the cleaner's passes, a bucket move with a writer, ``mapentities``, the health page's
counts), every statement sent to a shard is captured at the driver and reduced to its shape
(tests/support/plans.py). Each shape is then ``EXPLAIN``-ed, with the values it was sent with,
against a copy of its shard's database grown to tens of thousands of rows per table. A full
scan (``ALL``, or an ``index`` scan without ``LIMIT``) fails, and so does a key other than the
one its conditions name, unless the shape is listed below with its reason; a listed shape that
no longer needs its entry fails too (the lists cannot go stale).

Statements to the metadata database (Django's ORM: index states, cleaner passes, moves) are
not judged: their tables hold one row per index, pass or move.
"""

from __future__ import annotations

import re
from typing import Any

import MySQLdb
import pytest
from django.db import connections

from schemaless_store.tables import entities, index_rows, moved_rows
from schemaless_store.topology import shards
from tests.support import STORE, plan_workload
from tests.support.plans import Capture, Verdict, grown_copy, judged, keys_of, verb

pytestmark = [pytest.mark.mariadb_only, STORE, pytest.mark.usefixtures("buckets_restored")]

# Shapes that read a whole table on purpose (a regex on the shape -> why).
SCANS_ALLOWED: dict[str, str] = {
    r"^SELECT COUNT\(\*\) FROM `\w+`$": "the health page's exact count of a table, only below "
    "tables/counts.py's EXACT_COUNT_BELOW rows (information_schema's estimate from there)",
    r"^SELECT g\.generation, b\.bucket FROM schemaless_bucket_generation g LEFT JOIN "
    r"schemaless_buckets b ON b\.state IN": "the set of buckets a shard serves, read once per "
    "process and bucket generation (guards/fence.py learn()): the answer is most of the "
    "table, which holds one row per bucket (SCHEMALESS['BUCKETS'], 4,096 by default)",
    r"^SELECT [^;]* FROM `\w+` LIMIT \?( FOR UPDATE SKIP LOCKED)?$": "any one row of a "
    "table, read once per table and shard as a move's triggers are proven "
    "(tables/capture_probe.py's sample, locked, passing over rows writers hold; and Django's "
    "introspection of its columns): the scan stops at the first row it may take",
}
# Shapes whose plan takes another key than the one their conditions name, on purpose.
KEYS_ALLOWED: dict[str, str] = {
    r"^SELECT i\.`username`, .* FROM `index_users_username` i LEFT JOIN entities e .* WHERE "
    r"i\.`username` = \?": "a unique index's page: its unique key on the value alone finds "
    "the one row (const); the rule, seeing entity_id in the join, names the primary key "
    "(value, entity_id), which serves as well",
}

EXPLAINED = ("SELECT", "UPDATE", "DELETE", "REPLACE", "INSERT")
CATALOG = re.compile(r"\b(information_schema|performance_schema|mysql)\.", re.I)


def explainable(shape: str) -> bool:
    """Statements that read a table: not ``BEGIN``, ``SET``, DDL, ``INSERT ... VALUES``, or a
    read of the server's catalog."""
    kind = verb(shape)
    if kind not in EXPLAINED or CATALOG.search(shape):
        return False
    if kind in ("INSERT", "REPLACE"):
        return re.search(r"\bSELECT\b", shape, re.I) is not None
    return kind != "SELECT" or re.search(r"\bFROM\b", shape, re.I) is not None


def capture(run: Any) -> Capture:
    """Every statement ``run()`` sends, on connections opened while it runs."""
    shards.close_index_connections()
    connections.close_all()
    with Capture() as captured:
        run()
    shards.close_index_connections()
    connections.close_all()
    return captured


def verdicts(captured: Capture) -> tuple[dict[str, list[Verdict]], dict[str, int]]:
    """Each explainable shape sent to a shard: its samples' verdicts; and how many shapes of
    each kind were captured (explained or not)."""
    found: dict[str, list[Verdict]] = {}
    kinds: dict[str, int] = {}
    for alias in shards.shard_aliases():
        settings = connections[alias].settings_dict
        db = settings["NAME"]
        sent = {key: s for key, s in captured.shapes.items() if s.db == db}
        if not sent:
            continue
        conn = MySQLdb.connect(
            host=settings["HOST"],
            port=int(settings["PORT"]),
            user=settings["USER"],
            password=settings["PASSWORD"],
            database=db,
        )
        try:
            copy = grown_copy(conn, db, captured.dropped.get(db, {}))
            keys = keys_of(conn, copy)
            conn.select_db(copy)
            for key, one in sent.items():
                shape = key.split(": ", 1)[1]
                explained = explainable(shape)
                name = f"{verb(shape)}{'' if explained else ' (not explained)'}"
                kinds[name] = kinds.get(name, 0) + 1
                if explained:
                    found[f"{alias}: {shape}"] = list(judged(conn, one, shape, keys))
            conn.select_db(db)
            conn.cursor().execute(f"DROP DATABASE `{copy}`")
        finally:
            conn.close()
    return found, kinds


def problems(found: dict[str, list[Verdict]]) -> dict[str, list[str]]:
    """Each shape's problems, but those its allow-list entry explains."""
    out = {}
    for key, verdicts_ in found.items():
        shape = key.split(": ", 1)[1]
        listed = [
            p
            for v in verdicts_
            for p in v.problems
            if not (
                ("scan" in p and any(re.search(r, shape) for r in SCANS_ALLOWED))
                or ("meant" in p and any(re.search(r, shape) for r in KEYS_ALLOWED))
            )
        ]
        if listed:
            out[key] = sorted(set(listed))
    return out


def stale_entries(found: dict[str, list[Verdict]]) -> list[str]:
    """Allow-list entries that match no shape with the problem they excuse."""
    stale = []
    for entries, word in ((SCANS_ALLOWED, "scan"), (KEYS_ALLOWED, "meant")):
        for pattern in entries:
            if not any(
                re.search(pattern, key.split(": ", 1)[1]) and word in p
                for key, vs in found.items()
                for v in vs
                for p in v.problems
            ):
                stale.append(pattern)
    return stale


def report(found: dict[str, list[Verdict]], kinds: dict[str, int]) -> str:
    distinct = {key.split(": ", 1)[1] for key in found}
    lines = [
        f"{sum(kinds.values())} shapes captured on the shards: {dict(sorted(kinds.items()))}; "
        f"{len(found)} explained ({len(distinct)} distinct, both shards together)"
    ]
    for key, vs in sorted(found.items()):
        plan = "; ".join(f"{r['table']} {r['type']} {r['key']}" for r in (vs[0].rows if vs else []))
        lines.append(f"{key[:160]}\n    {vs[0].origin if vs else ''} -> {plan}")
    return "\n".join(lines)


def test_no_statement_the_store_sends_scans_what_a_key_finds(monkeypatch):
    captured = capture(lambda: plan_workload.everything(monkeypatch))
    found, kinds = verdicts(captured)
    print(report(found, kinds))
    assert len(found) >= 60, report(found, kinds)  # the workload reached every path
    families = [
        r"DELETE FROM `?index_user_id`? WHERE",  # an indexed value changed: its old row goes
        r"SELECT .* FROM `?entities`?",
        r"UPDATE `?entities`?",
        r"DELETE FROM `?entities`?",
        r"FOR UPDATE",
    ]
    for family in families:
        assert any(re.search(family, key) for key in found), family
    # The store's driver calls without a cursor are captured too: a read by id, the commit's
    # batch (its receipt, its statements).
    senders = {where for sent in captured.shapes.values() for where in sent.senders}
    for sender in ("tables.entities.select_one", "tables.receipts.commit_batch"):
        assert sender in senders, (sender, sorted(senders))
    failing = problems(found)
    assert failing == {}, "\n".join(
        f"{key} [sent by {found[key][0].origin}]: {listed}" for key, listed in failing.items()
    )
    assert stale_entries(found) == [], "allow-list entries no shape needs any more"


def _one_tuple_in(columns: Any, count: int) -> str:
    """``keys_where`` as it was before issue 45: a row ``IN`` for any number of keys."""
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    return f"({', '.join(columns)}) IN ({', '.join([one] * count)})"


def test_the_plan_test_fails_on_a_one_tuple_in(monkeypatch):
    """With ``keys_where``'s one-key spelling reverted, the writes' old index rows are deleted
    with ``(a, b) IN ((x, y))``, and the test sees the full scan."""
    for module in (entities, index_rows, moved_rows):
        monkeypatch.setattr(module, "keys_where", _one_tuple_in)
    # The deletes are built once per shape (issue 45, item 5): built again, with the broken
    # spelling, and once more after it.
    entities._delete_sql.cache_clear()
    try:
        captured = capture(lambda: plan_workload.writes(monkeypatch))
    finally:
        monkeypatch.undo()
        entities._delete_sql.cache_clear()
    found, _kinds = verdicts(captured)
    failing = problems(found)
    scans = [
        key
        for key, listed in failing.items()
        if re.search(r"DELETE FROM `?index_\w+`? WHERE \(.*\) IN \(\(\?\+\)\)", key)
        and any("full scan" in p for p in listed)
    ]
    assert scans, failing

"""The change feed: ordered, resumable, no gaps and no duplicates (SQLite and MariaDB)."""

from __future__ import annotations

import datetime as dt
import io
import json
import threading
import time
import uuid
from collections import Counter

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import override_settings
from django.utils import timezone

from schemaless_store.cells import feed
from schemaless_store.exceptions import ConfigurationError, InvalidQuery
from schemaless_store.models import Cell, Entity
from schemaless_store.topology import bucket_map, shards
from tests.support.reliability_report import recording

# Positions start at 1 in every test (SQLite's flush keeps AUTOINCREMENT counters otherwise, and
# a feed read from 0 would rightly wait at the "hole" before the first cell).
pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True, databases="__all__")


def drain(alias: str, after: int = 0, limit: int = 7) -> tuple[list[feed.Change], int]:
    found: list[feed.Change] = []
    position = after
    while True:
        page = feed.changes(alias, after=position, limit=limit)
        found.extend(page)
        if not page.changes:
            return found, position
        position = page.position


def stored(alias: str) -> list[tuple[int, bytes, str, int]]:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT added_at, row_key, column_name, ref_key FROM cell ORDER BY added_at")
        return [(a, bytes(k), c, r) for a, k, c, r in cursor.fetchall()]


def test_changes_come_in_append_order_and_resume_from_the_position():
    rows = [uuid.uuid4() for _ in range(12)]
    for n, row in enumerate(rows):
        Cell.objects.put(row, "users", {"n": n})
        Cell.objects.put(row, "users", {"n": n, "again": True})
    seen = []
    for alias in shards.shard_aliases():
        changes, position = drain(alias, limit=5)
        assert [c.position for c in changes] == [a for a, *_ in stored(alias)]
        assert position == (changes[-1].position if changes else 0)
        assert feed.changes(alias, after=position).changes == []
        seen.extend(changes)
    assert len(seen) == 24
    assert {(c.row_key, c.ref_key) for c in seen} == {(r, v) for r in rows for v in (1, 2)}
    change = next(c for c in seen if c.ref_key == 2)
    assert change.body["again"] is True and not change.deleted and not change.is_entity


@override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})
def test_with_history_entity_writes_and_deletes_are_in_the_feed():
    entity = Entity.objects.create(title="a")
    entity["title"] = "b"
    entity.save()
    entity.delete()
    changes, _ = drain(entity.shard)
    assert [(c.row_key, c.ref_key, c.deleted) for c in changes] == [
        (entity.id, 1, False),
        (entity.id, 2, False),
        (entity.id, 3, True),
    ]
    assert all(c.is_entity for c in changes)
    assert [c.body and c.body["title"] for c in changes] == ["a", "b", None]


def test_a_recent_hole_stops_the_feed_until_it_settles():
    """A cell after a hole is held back while an insert before it could still commit."""
    row = uuid.uuid4()
    alias = bucket_map.alias_for(row.bytes)
    first = Cell.objects.put(row, "users", {"v": 1})
    conn = connections[alias]
    with conn.cursor() as cursor:  # a cell after a hole: as if an insert between rolled back
        cursor.execute(
            "INSERT INTO cell (added_at, row_key, column_name, ref_key, body, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            [
                first.added_at + 2,
                row.bytes,
                "users",
                2,
                None,
                conn.ops.adapt_datetimefield_value(timezone.now()),
            ],
        )
    page = feed.changes(alias)
    assert [c.position for c in page] == [first.added_at]
    assert feed.changes(alias, after=page.position).changes == []
    with override_settings(SCHEMALESS={"BUCKETS": 4096, "FEED_GAP_GRACE": 0}):
        assert [c.position for c in feed.changes(alias, after=page.position)] == [
            first.added_at + 2
        ]


def test_an_old_hole_is_passed():
    row = uuid.uuid4()
    alias = bucket_map.alias_for(row.bytes)
    conn = connections[alias]
    old = timezone.now() - dt.timedelta(minutes=5)
    with conn.cursor() as cursor:
        for added_at in (5, 9):
            cursor.execute(
                "INSERT INTO cell (added_at, row_key, column_name, ref_key, body, created_at) "
                "VALUES (%s, %s, %s, %s, NULL, %s)",
                [added_at, row.bytes, "users", added_at, conn.ops.adapt_datetimefield_value(old)],
            )
    assert [c.position for c in feed.changes(alias)] == [5, 9]


@pytest.mark.mariadb_only
def test_an_uncommitted_insert_before_a_committed_one_is_not_skipped():
    """The race the grace period exists for, with a real open transaction on MariaDB."""
    row = uuid.uuid4()
    alias = bucket_map.alias_for(row.bytes)
    base = Cell.objects.put(row, "users", {"v": 0})
    slow = connections.create_connection(alias)
    try:
        slow.set_autocommit(False)
        with slow.cursor() as cursor:
            cursor.execute(
                "INSERT INTO cell (row_key, column_name, ref_key, body, created_at) "
                "VALUES (%s, 'slow', 1, NULL, %s)",
                [row.bytes, slow.ops.adapt_datetimefield_value(timezone.now())],
            )
            cursor.execute("SELECT LAST_INSERT_ID()")
            slow_position = cursor.fetchone()[0]
        fast = Cell.objects.put(row, "users", {"v": 1})
        assert fast.added_at == slow_position + 1
        page = feed.changes(alias, after=base.added_at)
        assert page.changes == [] and page.position == base.added_at
        slow.commit()
    finally:
        slow.close()
    page = feed.changes(alias, after=base.added_at)
    assert [c.position for c in page] == [slow_position, fast.added_at]


@pytest.mark.reliability
@override_settings(SCHEMALESS={"BUCKETS": 4096, "FEED_GAP_GRACE": 2.0})
def test_concurrent_writers_and_a_restarting_reader_see_every_change_exactly_once():
    """Writers racing (on MariaDB: deadlocks between first versions leave permanent holes in
    added_at) while a reader that keeps only its saved positions follows the feed."""
    rows = [uuid.uuid4() for _ in range(6)]
    stop = threading.Event()
    errors: list[BaseException] = []
    written: list[tuple[uuid.UUID, int]] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        try:
            i = 0
            while not stop.is_set() and i < 40:
                cell = Cell.objects.put(rows[(n + i) % len(rows)], "users", {"w": n, "i": i})
                with lock:
                    written.append((cell.row_key, cell.ref_key))
                i += 1
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    seen: list[tuple[uuid.UUID, int]] = []
    saved = {alias: 0 for alias in shards.shard_aliases()}  # what a consumer would persist

    def read_some() -> None:
        for alias in saved:
            # Each read is a "restart": it knows only the saved position.
            page = feed.changes(alias, after=saved[alias], limit=3)
            seen.extend((c.row_key, c.ref_key) for c in page)
            saved[alias] = page.position

    fault = "Change feed: 4 writers and a reader restarting from saved positions (changes)"
    with recording(fault) as tally:
        workers = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for worker in workers:
            worker.start()
        while any(worker.is_alive() for worker in workers):
            read_some()
        for worker in workers:
            worker.join()
        for error in errors:
            tally.fail(f"a writer raised {error!r}")
        time.sleep(2.1)  # every hole left now is older than the grace period: the feed passes it
        for _ in range(200):
            before = len(seen)
            read_some()
            if len(seen) == before:
                break
        tally.cases = len(written)
        for change in sorted(set(written) - set(seen), key=str):
            tally.lost(f"change {change} never read")
        for change, times in Counter(seen).items():
            if times > 1:
                tally.wrong(f"change {change} read {times} times", count=times - 1)
        for change in sorted(set(seen) - set(written), key=str):
            tally.wrong(f"change {change} read but never written")
    assert len(written) == 160


def test_bad_arguments_are_clear_errors():
    alias = shards.shard_aliases()[0]
    with pytest.raises(ConfigurationError, match="not a shard alias"):
        feed.changes("nope")
    with pytest.raises(InvalidQuery, match="feed position"):
        feed.changes(alias, after=-1)
    with pytest.raises(InvalidQuery, match="feed position"):
        feed.changes(alias, after="0; DROP TABLE cell")  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery, match="limit"):
        feed.changes(alias, limit=0)


def tail(*args: str) -> list[dict]:
    out = io.StringIO()
    call_command("tailchanges", "--once", *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_tailchanges_prints_json_lines_and_resumes_from_its_state_file(tmp_path):
    state = tmp_path / "positions.json"
    row = uuid.uuid4()
    Cell.objects.put(row, "users", {"name": "bret", "id": uuid.UUID(int=1)})
    Cell.objects.put(row, "users", {"name": "bret t"})
    lines = tail("--state", str(state))
    assert [(line["row_key"], line["ref_key"]) for line in lines] == [(str(row), 1), (str(row), 2)]
    assert lines[0]["body"] == {"name": "bret", "id": {"$uuid": str(uuid.UUID(int=1))}}
    assert lines[0]["column"] == "users" and lines[0]["deleted"] is False
    saved = json.loads(state.read_text())
    assert saved[bucket_map.alias_for(row.bytes)] == lines[-1]["position"]
    assert tail("--state", str(state)) == []
    Cell.objects.put(row, "users", {"name": "third"})
    again = tail("--state", str(state))
    assert [line["ref_key"] for line in again] == [3]


def test_tailchanges_from_head_and_after_and_one_shard():
    row = uuid.uuid4()
    alias = bucket_map.alias_for(row.bytes)
    first = Cell.objects.put(row, "users", {"v": 1})
    assert tail("--from-head") == []
    assert [line["ref_key"] for line in tail("--shard", alias)] == [1]
    Cell.objects.put(row, "users", {"v": 2})
    lines = tail("--shard", alias, "--after", f"{alias}={first.added_at}")
    assert [line["ref_key"] for line in lines] == [2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard", "nope"], "--shard: .nope. is not a shard alias; the shards are"),
        (["--after", "shard_0"], "SHARD=POSITION"),
        (["--after", "shard_0=-3"], "SHARD=POSITION"),
        (["--limit", "0"], "at least 1"),
    ],
)
def test_tailchanges_bad_arguments(args, message):
    with pytest.raises(CommandError, match=message):
        tail(*args)


def test_tailchanges_refuses_a_bad_state_file(tmp_path):
    state = tmp_path / "positions.json"
    state.write_text('{"shard_0": "x"}')
    with pytest.raises(CommandError, match="not a JSON object of shard: position"):
        tail("--state", str(state))

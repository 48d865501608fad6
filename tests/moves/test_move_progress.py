"""``movebuckets`` on a terminal: one line per phase (copy, catch-up, flip, verify, delete), the
copy's and the delete's bars with the dry run's row counts as their total, each table's name
drawn with its own count; nothing at all when not on a terminal (docs/resharding.md)."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

from schemaless_store.config.metadata import BucketMove
from schemaless_store.management.commands import movebuckets
from schemaless_store.moves import plan
from schemaless_store.moves.phase_bars import PHASES, MoveProgress
from schemaless_store.tables.moved_rows import moved_tables
from schemaless_store.topology import shards
from tests.support import STORE, buckets
from tests.support.factories import PostFactory
from tests.support.terminal import ESC, Terminal, on_terminal

MOVED = "0-299"


def final_lines(text: str) -> dict[str, str]:
    """What each phase's line shows last (tqdm redraws a line after ``\\r``)."""
    found: dict[str, str] = {}
    for piece in re.split(r"[\r\n]", text):
        name = piece.split(":", 1)[0].strip()
        if name in PHASES:
            found[name] = piece.rstrip()
    return found


def order_of_phases(text: str) -> list[str]:
    seen: list[str] = []
    for piece in re.split(r"[\r\n]", text):
        name = piece.split(":", 1)[0].strip()
        if name in PHASES and name not in seen:
            seen.append(name)
    return seen


@STORE
def test_a_move_on_a_terminal_draws_one_line_per_phase_with_totals():
    with buckets.restored_afterwards():
        PostFactory.create_batch(60)
        target = shards.shard_aliases()[1]
        counted = plan.count_rows(plan.plan(target, plan.parse_buckets(MOVED)))
        kept = {t.name for t in moved_tables() if t.kept_on_source}
        copy_total = sum(sum(rows.values()) for rows in counted.rows.values())
        delete_total = sum(
            n for rows in counted.rows.values() for t, n in rows.items() if t not in kept
        )
        assert copy_total >= delete_total > 0

        command, out, err = on_terminal(movebuckets.Command)
        call_command(command, "--to", target, "--buckets", MOVED, "--batch", "7")
        shown = err.getvalue()

    assert order_of_phases(shown) == list(PHASES)
    last = final_lines(shown)
    assert re.fullmatch(
        rf"copy    : 100%\|[#█]+\| {copy_total}/{copy_total} rows \[[\d:]+<[\d:]+\]", last["copy"]
    ), last["copy"]
    assert re.fullmatch(r"catch-up: \d+ changes \[[\d:]+\]", last["catch-up"]), last["catch-up"]
    assert re.fullmatch(
        r"flip    : done in (under 1 s|\d+ s); writes paused \d+ ms", last["flip"]
    ), last["flip"]
    assert re.fullmatch(r"verify  : verified: yes, in (under 1 s|\d+ s)", last["verify"])
    assert re.fullmatch(
        rf"delete  : 100%\|[#█]+\| {delete_total}/{delete_total} rows \[[\d:]+<[\d:]+\]",
        last["delete"],
    ), last["delete"]
    assert ESC not in shown  # not styled as an error
    assert "Move #" in out.getvalue() and "done: 0-299" in out.getvalue()


@STORE
def test_not_on_a_terminal_nothing_is_drawn_and_nothing_counted(monkeypatch):
    def no_count(*args, **kwargs):
        raise AssertionError("the rows are counted only for a bar that is drawn")

    monkeypatch.setattr("schemaless_store.moves.phase_bars.count_rows", no_count)
    with buckets.restored_afterwards():
        PostFactory.create_batch(20)
        target = shards.shard_aliases()[1]
        out, err = io.StringIO(), io.StringIO()
        call_command("movebuckets", "--to", target, "--buckets", MOVED, stdout=out, stderr=err)
    assert err.getvalue() == ""
    assert "done: 0-299" in out.getvalue()


def progress(totals: dict[str, int]) -> tuple[MoveProgress, Terminal]:
    move = BucketMove(target="shard_1", buckets=[[0, 9]], sources={"shard_0": [[0, 9]]})
    screen = Terminal()
    return MoveProgress(move, file=screen, enabled=True, count=lambda _move: totals), screen


def redraw_every_update(bar) -> None:
    bar.mininterval = 0
    bar.miniters = 0
    bar.dynamic_miniters = False


def test_the_label_is_drawn_with_its_own_count():
    """ "copy shard_0 cell" is never drawn beside the count before its rows (the label used to
    lag one table behind its number)."""
    shown, screen = progress({"copy": 100, "delete": 80})
    shown.phase("copy")
    redraw_every_update(shown.bar)
    screen.seek(0)
    screen.truncate()
    shown.report("copy shard_0 entities", 5)
    shown.report("copy shard_0 cell", 3)
    shown.report("copy shard_0 index_a", 4)
    draws = [p for p in re.split(r"[\r\n]", screen.getvalue()) if "rows" in p]
    pairs = [re.search(r"(\d+)/100 rows \[.*, shard_0 (\w+)\]", p).groups() for p in draws]
    shown.close()
    assert pairs == [("5", "entities"), ("8", "cell"), ("12", "index_a")]


def test_a_resumed_copy_starts_its_bar_at_what_was_copied():
    shown, screen = progress({"copy": 100, "delete": 80})
    shown.move.counts = {"copied entities": 30, "copied cell": 10, "replayed": 4}
    shown.phase("copy")
    assert shown.bar.n == 40 and shown.bar.total == 100
    shown.close(failed=True)
    assert "stopped after" in screen.getvalue()


def test_more_rows_than_counted_grow_the_total_instead_of_passing_it():
    shown, _screen = progress({"copy": 10, "delete": 10})
    shown.phase("copy")
    shown.report("copy shard_0 entities", 8)
    shown.report("copy shard_0 entities", 8)  # written since the count
    assert (shown.bar.n, shown.bar.total) == (16, 16)
    shown.close()


@pytest.mark.parametrize("failed", [False, True])
def test_a_phase_line_ends_when_the_next_starts(failed):
    shown, screen = progress({"copy": 4, "delete": 4})
    shown.phase("copy")
    shown.report("copy shard_0 entities", 4)
    shown.phase("catch-up")
    shown.phase("flip")
    shown.phase("flip")  # the flip says so twice: one line
    shown.close(failed=failed)
    text = screen.getvalue()
    assert order_of_phases(text) == ["copy", "catch-up", "flip"]
    assert text.count("\n") == 3  # each ended line, once
    assert ("stopped after" in final_lines(text)["flip"]) is failed

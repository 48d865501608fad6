"""The ``runcleaner`` command: its summary, output and progress, its options and what it
refuses, a failing pass recorded while the others run, and a long run's totals."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError

from schemaless_store.cleaner import Cleaner, Summary
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.management.commands import runcleaner
from schemaless_store.models import CleanerCheckpoint
from schemaless_store.tables import lifecycle
from schemaless_store.topology import shards
from tests.support import STORE, child
from tests.support.cleaner import PUBLISHED, passes, state
from tests.support.raw import index_rows, raw_delete

pytestmark = STORE


def run_command(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("runcleaner", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_runcleaner_once_prints_a_summary(published, posts):
    out, _err = run_command("--once", "--batch-size=50")

    assert f"index {PUBLISHED} is backfilled on every shard: it is ready" in out
    summary = out.strip().splitlines()[-1]
    assert f"{len(posts)} rows inserted, 0 stale removed, 0 orphans removed" in summary
    assert summary.startswith("Cleaner finished in ")
    assert state(PUBLISHED) == "ready"


@pytest.mark.parametrize(("args", "niced"), [([], [10]), (["--nice=3"], [3]), (["--nice=0"], [])])
def test_runcleaner_lowers_its_cpu_priority(posts, monkeypatch, args, niced):
    calls: list[int] = []
    monkeypatch.setattr(runcleaner.os, "nice", calls.append)

    run_command("--once", "--index=index_link", *args)

    assert calls == niced


def test_runcleaner_is_quiet_with_verbosity_0(published, posts):
    out, err = run_command("--once", "-v", "0")
    assert (out, err) == ("", "")
    assert state(PUBLISHED) == "ready"


def test_runcleaner_on_one_shard_leaves_the_others(published, posts):
    alias = shards.shard_aliases()[1]
    out, _err = run_command(f"--index={PUBLISHED}", f"--shard={alias}", "--once")

    assert {p.shard for p in passes(index_name=PUBLISHED)} == {alias}
    assert state(PUBLISHED) == "building"
    assert "still building" in out
    run_command(f"--index={PUBLISHED}", "--once")
    assert state(PUBLISHED) == "ready"


def test_progress_bars_show_done_total_rate_and_eta(published, posts):
    stream = io.StringIO()
    Cleaner(indexes=[PUBLISHED], once=True, progress=True, progress_file=stream).run()
    shown = stream.getvalue()
    for alias in shards.shard_aliases():
        assert f"backfill {PUBLISHED} {alias}: 100%" in shown
    assert "entities/s" in shown and "<00:00" in shown  # rate and remaining time
    total = CleanerCheckpoint.objects.get(index_name=PUBLISHED, shard=alias).entities_total
    assert f"{total}/{total}" in shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--index=nope"], "no index 'nope' is declared; declared indexes: "),
        (["--shard=shard_9"], "'shard_9' is not a shard alias; the shards are shard_0, shard_1"),
        (["--batch-size=0"], "--batch-size: must be a whole number of at least 1, not '0'"),
        (["--sleep=-1"], "--sleep: must be a number of seconds (0 or more), not '-1'"),
        (["--lock-wait=soon"], "--lock-wait: must be a number of seconds"),
        (["--duty=0"], "--duty: must be a share above 0 and at most 1, not '0'"),
        (["--duty=1.5"], "--duty: must be a share above 0 and at most 1, not '1.5'"),
        (["--nice=20"], "--nice: must be a whole number from 0 to 19, not '20'"),
        (["--max-latency=0"], "--max-latency: must be a number of milliseconds above 0, not '0'"),
    ],
)
def test_runcleaner_refuses_bad_options(args, message):
    with pytest.raises(CommandError) as caught:
        run_command("--once", *args)
    assert message in str(caught.value)
    if "--index" in args[0]:
        assert "index_link" in str(caught.value)  # the declared ones are listed


def test_runcleaner_refuses_a_retired_index_and_points_to_dropindex():
    with child.declared(PUBLISHED):
        pass
    lifecycle.sync_states()  # no longer declared: retired
    assert state(PUBLISHED) == "retired"
    with pytest.raises(CommandError, match=f"manage.py dropindex {PUBLISHED}"):
        run_command(f"--index={PUBLISHED}", "--once")


def test_runcleaner_fails_on_an_index_without_state(posts):
    index = child.EXTRA_INDEXES["index_cleaner_color"]
    registry.register(index)
    try:
        with pytest.raises(
            CommandError, match=re.escape("has no state yet: run `manage.py migrateall`")
        ):
            run_command("--index=index_cleaner_color", "--once")
    finally:
        registry.unregister(index.name)


def test_a_failing_pass_is_recorded_and_the_others_still_run(posts, monkeypatch):
    broken = shards.shard_aliases()[0]
    from schemaless_store.tables import entities as entity_table

    original = entity_table.newest_first

    def failing(source, alias, bound, limit):
        if alias == broken:
            raise ShardUnavailable(alias, "connection refused")
        return original(source, alias, bound, limit)

    monkeypatch.setattr(entity_table, "newest_first", failing)
    from schemaless_store.tables import json_index  # the repair's read with JSON bodies

    server_read = json_index.read_newest_first

    def failing_server_read(index, extraction, alias, bound, limit):
        if alias == broken:
            raise ShardUnavailable(alias, "connection refused")
        return server_read(index, extraction, alias, bound, limit)

    monkeypatch.setattr(json_index, "read_newest_first", failing_server_read)
    with pytest.raises(CommandError) as caught:
        run_command("--index=index_link", "--once")

    assert f"repair of index_link on {broken}: failed" in str(caught.value)
    (failed,) = passes(status="failed")
    assert (failed.kind, failed.shard) == ("repair", broken)
    assert f"shard '{broken}' is unavailable: connection refused" in failed.message
    assert len(passes(status="done")) == 3  # its sweep, and the other shard's repair and sweep


def test_an_unreadable_metadata_database_is_reported_not_fatal(monkeypatch):
    def unreadable(refresh: bool = False):
        raise OperationalError("server has gone away")

    monkeypatch.setattr(lifecycle, "states", unreadable)
    summary = Cleaner(once=True).run()
    assert summary.problems == [
        "cannot read the index states: OperationalError: server has gone away"
    ]
    with pytest.raises(CommandError, match="cannot read the index states"):
        run_command("--once")


def test_a_long_run_keeps_totals_of_every_round_but_only_the_last_rounds_passes(posts):
    raw_delete("index_link", posts[0].id.bytes)
    cleaner = Cleaner(indexes=["index_link"], once=True)
    summary = Summary()

    cleaner.run_round(summary)
    cleaner.run_round(summary)

    assert summary.rounds == 2
    assert len(summary.passes) == 2 * len(shards.shard_aliases())  # repair + sweep, last round
    assert summary.total("inserted") == 1  # in the first round
    assert sum(p.inserted for p in summary.passes) == 0
    last_round = sum(p.scanned for p in summary.passes)
    assert last_round == len(posts) + len(index_rows("index_link"))
    assert summary.total("scanned") >= 2 * last_round - 1  # round 1 may miss the re-added row
    assert ", 2 rounds)" in summary.describe()

"""Stopping, crashing, resuming: ``stop()`` and signals finish the current batch, a second
Ctrl-C stops at once, a backfill killed with SIGKILL resumes from its checkpoint."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest
from django.db import connections

from schemaless_store.cleaner import Cleaner
from schemaless_store.models import CleanerCheckpoint, CleanerPass
from tests.support import STORE, child
from tests.support.cleaner import PUBLISHED, passes, state
from tests.support.invariants import assert_exact

pytestmark = STORE


def wait_for(condition, timeout: float = 60, process=None, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"child exited ({process.returncode}) early:\n{out}\n{err}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def backfilled() -> int:
    return sum(
        CleanerCheckpoint.objects.filter(index_name=PUBLISHED).values_list(
            "entities_done", flat=True
        )
    )


def test_stop_finishes_the_current_batch_and_a_rerun_resumes(published, posts):
    # The throttle leaves seconds to stop it mid-backfill; stop() cuts the pause short.
    cleaner = Cleaner(indexes=[PUBLISHED], once=True, batch_size=10, sleep=0.2)
    thread = threading.Thread(target=lambda: (cleaner.run(), connections.close_all()))
    thread.start()
    wait_for(lambda: backfilled() >= 20, what="the backfill to start")
    cleaner.stop()
    thread.join(timeout=30)

    (stopped,) = passes(index_name=PUBLISHED)
    assert (stopped.kind, stopped.status) == ("backfill", "interrupted")
    assert stopped.entities_scanned % 10 == 0  # whole batches only
    assert state(PUBLISHED) == "building"
    done_before = backfilled()

    summary = Cleaner(indexes=[PUBLISHED], once=True, batch_size=10).run()

    rescanned = sum(p.scanned for p in summary.passes if p.kind == "backfill")
    assert rescanned == len(posts) - done_before
    assert state(PUBLISHED) == "ready"
    assert_exact([published])


def test_a_backfill_killed_with_sigkill_resumes_from_its_checkpoint(published, posts):
    process = child.spawn(
        "manage",
        "runcleaner",
        f"--index={PUBLISHED}",
        "--once",
        "--batch-size=10",
        "--sleep=0.1",
        extra_indexes=(PUBLISHED,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: backfilled() >= 30, process=process, what="the child's backfill")
    process.kill()
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    at_kill = {c.shard: c for c in CleanerCheckpoint.objects.filter(index_name=PUBLISHED)}
    done_at_kill = sum(c.entities_done for c in at_kill.values())
    assert 30 <= done_at_kill < len(posts)
    assert not all(c.done for c in at_kill.values())
    (dead,) = passes(index_name=PUBLISHED, status="running")  # it died mid-pass

    # The dead child's lock is gone: this cleaner is not told to skip anything.
    summary = Cleaner(indexes=[PUBLISHED], once=True, batch_size=25).run()

    assert not summary.skipped
    backfills = [p for p in summary.passes if p.kind == "backfill" and p.scanned]
    assert sum(p.scanned for p in backfills) == len(posts) - done_at_kill  # not from zero
    for shard, checkpoint in at_kill.items():
        if checkpoint.last_added_id and not checkpoint.done:
            rerun = next(p for p in backfills if p.shard == shard)
            assert rerun.scanned == checkpoint.entities_total - checkpoint.entities_done
    dead.refresh_from_db()
    assert dead.status == "interrupted"
    assert state(PUBLISHED) == "ready"
    assert_exact([published])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_runcleaner_runs_until_a_signal_then_exits_0(posts, sig):
    process = child.spawn(
        "manage",
        "runcleaner",
        "--batch-size=5",
        "--sleep=0.02",
        "--interval=60",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: CleanerPass.objects.exists(), process=process, what="a first pass")
    process.send_signal(sig)
    out, err = process.communicate(timeout=60)

    assert process.returncode == 0, f"{out}\n{err}"
    assert f"{signal.Signals(sig).name} received: finishing the current batch" in out
    assert "Cleaner finished in" in out
    assert not passes(status="running")


def test_a_second_ctrl_c_stops_at_once():
    cleaner = Cleaner(once=True)
    cleaner._on_signal(signal.SIGTERM, None)
    assert not cleaner.running
    cleaner._on_signal(signal.SIGTERM, None)  # a second SIGTERM: still a graceful stop
    with pytest.raises(KeyboardInterrupt):
        cleaner._on_signal(signal.SIGINT, None)


def test_a_signal_landing_inside_the_throttles_wait_does_not_deadlock():
    """A handler runs in the main thread between two bytecodes, so it can land while that
    thread, inside the throttle's ``Event.wait()``, holds the event's own lock: handling the
    signal must not need that lock (it did: runcleaner hung after "SIGTERM received")."""
    cleaner = Cleaner(once=True)
    handled = threading.Event()
    restore = cleaner._handle_signals()  # as run() does

    def signal_inside_the_wait():
        with cleaner._stop._cond:  # held by Event.wait() around its checks
            cleaner._on_signal(signal.SIGTERM, None)
            handled.set()

    # On a thread of its own, so that a deadlock fails this test instead of hanging the suite.
    threading.Thread(target=signal_inside_the_wait, daemon=True).start()
    try:
        assert handled.wait(10), "the signal handler blocked on the stop event's lock"
        assert not cleaner.running
        assert cleaner._stop.wait(10)  # and a wait in progress wakes up once the lock is free
    finally:
        restore()

"""One cleaner per (index, shard): the server lock excludes a second holder, a shard
another cleaner holds is skipped or waited for, two processes on one index at once.
(On Galera: test_cleaner_lock_galera.py.)"""

from __future__ import annotations

import io
import subprocess
import threading
import time

from django.core.management import call_command

from schemaless_store.cleaner import Cleaner
from schemaless_store.guards.server_lock import ServerLock, lock_name
from schemaless_store.topology import shards
from tests.support import STORE, child
from tests.support.cleaner import PUBLISHED, passes, state
from tests.support.invariants import assert_exact

pytestmark = STORE


def test_lock_excludes_a_second_holder_until_released():
    alias = shards.shard_aliases()[0]
    first, second = ServerLock("index_link", alias), ServerLock("index_link", alias)
    other_index = ServerLock("index_tags", alias)
    try:
        assert first.acquire()
        assert not second.acquire()
        assert other_index.acquire()
        first.release()
        assert second.acquire()
    finally:
        for lock in (first, second, other_index):
            lock.release()


def test_lock_names_fit_the_server_limit():
    assert lock_name("test_shard0", "index_link") == "schemaless_cleaner.test_shard0.index_link"
    long_name = lock_name("a_database_with_a_long_name", "index_" + "x" * 58)
    assert len(long_name) <= 64 and long_name.startswith("schemaless_cleaner.")
    assert long_name != lock_name("a_database_with_a_long_name", "index_" + "y" * 58)


def test_a_shard_another_cleaner_holds_is_skipped_with_a_clear_message(posts):
    alias = shards.shard_aliases()[0]
    out, err = io.StringIO(), io.StringIO()
    with ServerLock("index_link", alias) as held:
        assert held.acquire()
        call_command("runcleaner", "--index=index_link", "--once", stdout=out, stderr=err)

    assert f"another cleaner is working on index_link on {alias}" in err.getvalue()
    assert "skipped" in out.getvalue()
    assert not passes(shard=alias)
    assert {p.status for p in passes(index_name="index_link")} == {"done"}


def test_a_cleaner_can_wait_for_the_lock(posts):
    alias = shards.shard_aliases()[0]
    held = ServerLock("index_link", alias)
    assert held.acquire()
    threading.Timer(0.5, held.release).start()
    started = time.monotonic()

    summary = Cleaner(indexes=["index_link"], shards=[alias], once=True, lock_wait=30).run()

    assert time.monotonic() - started >= 0.4
    assert not summary.skipped
    assert {(p.kind, p.status) for p in summary.passes} == {("repair", "done"), ("sweep", "done")}


def test_two_cleaner_processes_on_the_same_index_at_once(published, posts):
    runs = [
        child.spawn(
            "manage",
            "runcleaner",
            f"--index={PUBLISHED}",
            "--once",
            "--batch-size=20",
            "--sleep=0.01",
            extra_indexes=(PUBLISHED,),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    for run, (out, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, f"{out}\n{err}"
        assert "Traceback" not in err
    assert state(PUBLISHED) == "ready"
    assert_exact([published])
    assert not passes(status="failed")

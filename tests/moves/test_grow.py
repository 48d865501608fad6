"""Growing a live store onto a third server (issue 18): buckets move from both shards to the
third and back while writer processes create, update, delete, claim unique values and put
cells; the mover is SIGKILLed and rerun, and a writer is SIGKILLed during a move. Afterwards
(and one cleaner pass): every acknowledged write is there in its last acknowledged state, every
id is on exactly one shard (its owner's), index tables are exact, and every query an entity
implies finds it and nothing that does not match. On MariaDB the third shard is a third
throwaway server."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.grown import GrownStore, checked_census

pytestmark = pytest.mark.slow

# Each move's mover is SIGKILLed at a point of its own (tests/support/child.py
# MOVER_KILL_POINTS), then run again to the end.
MOVES = [
    ("shard_2", "0-1364", "catching up"),  # from shard_0
    ("shard_2", "2048-3412", "fenced"),  # from shard_1
    ("shard_0", "0-600", "deleting"),  # part of the first back
]


@pytest.fixture
def store(tmp_path: Path):
    third = None
    if settings.BACKEND == "mariadb":
        from schemaless_store.testing.mariadb import start_servers

        third = start_servers(1)[0]
    grown = GrownStore(tmp_path, third)
    try:
        yield grown
    finally:
        grown.close()
        if third is not None:
            third.stop()


def killed_then_finished(store: GrownStore, target: str, buckets: str, point: str) -> str:
    """Start the move with a mover that SIGKILLs itself at ``point``, run it again to the
    end; the phase the kill left (or 'done', or 'none')."""
    mover = store.spawn(
        "tests.support.child",
        "killedmover",
        point,
        "movebuckets",
        "--to",
        target,
        "--buckets",
        buckets,
        "--batch",
        "50",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert mover.wait(timeout=120) == -signal.SIGKILL
    status = store.manage("movebuckets", "--status").stdout.splitlines()
    left = "none"
    if len(status) > 2:  # the header, its rule, the newest move first
        start, end = status[0].index("Phase"), status[0].index("Buckets")
        left = status[2][start:end].strip()
    store.manage("movebuckets", "--to", target, "--buckets", buckets)
    return left


def test_buckets_move_to_a_third_server_and_back_under_writers(store, tmp_path):
    acks = [tmp_path / f"acks-{n}.jsonl" for n in range(4)]
    writers = [
        store.spawn("tests.support.grown", "writer", str(n), f"{n:x}", "10", str(acks[n]))
        for n in range(3)
    ]
    victim = store.spawn("tests.support.grown", "writer", "3", "3", "10", str(acks[3]))
    left = []
    try:
        time.sleep(1.0)
        for number, (target, buckets, point) in enumerate(MOVES):
            left.append(killed_then_finished(store, target, buckets, point))
            if number == 0:
                victim.send_signal(signal.SIGKILL)  # during the second move's copy or flip
    finally:
        for writer in writers:
            writer.wait(timeout=120)
        victim.kill()
        victim.wait()
    assert all(writer.returncode == 0 for writer in writers)
    assert all(phase not in ("none", "done") for phase in left), left  # each kill hit a move
    census = checked_census(store, acks)
    shards_used = {alias for aliases in census["placed"].values() for alias in aliases}
    assert shards_used == {"shard_0", "shard_1", "shard_2"}

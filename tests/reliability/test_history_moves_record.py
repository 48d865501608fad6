"""What a history run keeps of its moves (schemaless_store/testing/history/): each move's record
and the map's versions, written before the store is thrown away (``run.keep_moves``), and the
mover's output in the nemesis's record. Two 30-minute Galera soaks lost an acknowledged write
during a move and could not tell which phase the move was in: the metadata database was gone
and the nemesis had kept 300 characters of the mover's output (docs/reliability.md)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from schemaless_store.config.metadata import BucketMove, ShardMap
from schemaless_store.testing.history import nemesis as nemesis_module
from schemaless_store.testing.history.records import Recorder
from schemaless_store.testing.history.run import keep_moves


@pytest.mark.django_db(databases="__all__")
def test_the_moves_records_and_map_versions_are_kept_on_the_histories_clock(tmp_path: Path):
    flipped = timezone.now() - dt.timedelta(seconds=30)
    fenced_at = time.time() - 31.0
    move = BucketMove.objects.create(
        target="shard_1",
        buckets=[[10, 19]],
        sources={"shard_0": [[10, 19]]},
        phase="cleaning",
        checkpoints={"prepared": True, "marked_at": fenced_at - 5, "fenced_at": fenced_at},
        counts={"replayed": 7, "verified": None},
        flipped=flipped,
        longest_pause=0.25,
        message="resumed",
    )
    top = ShardMap.objects.order_by("-version").first()
    assert top is not None
    ShardMap.objects.create(
        version=top.version + 1,
        buckets=top.buckets,
        owners=top.owners,
        moving=[[10, 19]],
        note=f"move #{move.pk}: buckets moving to shard_1",
    )

    assert keep_moves(tmp_path / "moves.json") == 1

    kept = json.loads((tmp_path / "moves.json").read_text())
    (record,) = kept["moves"]
    assert record["move"] == move.pk
    assert record["phase"] == "cleaning"
    assert record["sources"] == {"shard_0": [[10, 19]]}
    assert record["counts"] == {"replayed": 7, "verified": None}
    assert record["checkpoints"]["fenced_at"] == fenced_at
    assert record["message"] == "resumed"
    # On the records' clock (time.monotonic()): the flip 30 s and the fence 31 s ago.
    now = time.monotonic()
    assert record["clock"]["flipped"] == pytest.approx(now - 30, abs=2)
    assert record["clock"]["fenced"] == pytest.approx(now - 31, abs=2)
    assert record["clock"]["finished"] is None
    notes = [version["note"] for version in kept["map_versions"]]
    assert notes[-1] == f"move #{move.pk}: buckets moving to shard_1"
    assert kept["map_versions"][-1]["moving"] == [[10, 19]]
    assert kept["map_versions"][-1]["clock"] == pytest.approx(now, abs=5)


def test_the_movers_whole_output_is_kept_in_its_record(tmp_path: Path, monkeypatch: Any):
    """The lines a soak needs are the resumes (``Resuming move #N (phase)``, ``connection lost
    ...; resuming``), the warnings and the last line; they were cut to the last 300 characters."""
    lines = [f"move #52: connection lost (try {n}); resuming" for n in range(40)]
    output = "Resuming move #52 (catching up).\n" + "\n".join(lines) + "\nMove #52 done\n"
    recorder = Recorder(tmp_path / "nemesis.jsonl")
    mover = nemesis_module.MoveBuckets(None, recorder, 1, threading.Event())  # type: ignore[arg-type]

    def run_mover(target: str, buckets: str) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(["movebuckets"], 0, output, "")

    monkeypatch.setattr(mover, "run_mover", run_mover)
    assert mover.move("shard_2", "0-9")
    recorder.close()

    ends = [
        json.loads(line)["detail"]
        for line in (tmp_path / "nemesis.jsonl").read_text().splitlines()
        if json.loads(line)["detail"].get("phase") == "end"
    ]
    assert [end["output"] for end in ends] == [output]
    assert len(output) > 300

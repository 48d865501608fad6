"""A bounded Jepsen-style history (issues 34 and 43, schemaless_store/testing/history): four
client processes, as application users without DDL or PROCESS, append to lists through
``modify`` and ``map_entities``, save, create, update, ``bulk_put``, delete, claim values under
a unique index, put cell versions, read through the entity cache and the near cache, read an
entity's kept versions and look values up through an index, for 80 seconds, while random store
sessions are KILLed, commit answers are lost after the commit landed and KILLed while the
``COMMIT`` is in flight, row locks are held past the clients' ``read_timeout``, buckets move to a
third server and back with every other mover SIGKILLed and resumed, and a server is SIGKILLed
and restarted. The checker must find no anomaly (docs/reliability.md#the-history-checker), and
the run must have done enough to prove it: minimum counts of ok operations of each kind, of
moves completed (not attempted) and of each fault injected, with no injection error.

Known to fail now and then on today's code, with `lost` or `resurrected` findings whose read
came from the near cache (`via: near`): the two near-cache faults of docs/reliability.md
("Issue 43's workload and faults: short runs"), open. The assertion stays until they are
repaired.

The run starts throwaway servers of its own (the suite's are not touched) and takes about two
minutes. ``SCHEMALESS_HISTORY_SEED`` replays another seed; a failure prints the seed and the
replay command with the checker's report. Beside it, fast on both backends: the soak command's
bad flags, and which exceptions a client records as a definite failure. The checker's own
tests, on hand-made histories, are in test_history_checker.py and
test_history_workload_checks.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from schemaless_store.testing.history.run import Run, parser

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]
SEED = os.environ.get("SCHEMALESS_HISTORY_SEED", "34")


# What 80 seconds on the shared two-core CI machine must at least have done. The counts of a
# quiet machine are several times these (docs/reliability.md#the-history-checker).
MINUTES = "1.33"
MINIMUM_OK = 1000
MINIMUM_MOVES_COMPLETED = 3
FAULTS = ("kill", "lose-commit", "kill-commit", "mover-kill", "lock-wait", "sigkill")
WORKLOAD = (
    "append",
    "map",
    "cellput",
    "save",
    "create",
    "write",
    "delete",
    "update",
    "bulk",
    "claim",
    "read",
    "find",
    "history",
)


def _history(out: Path, *flags: str, timeout: float) -> tuple[dict[str, Any], str]:
    """A run of the history checker in a process of its own, with the clients' seed: its
    summary, and what it printed (for a failure's message). It must have run to its report
    with no anomaly, no injection error and every client process ending well."""
    command = [sys.executable, "-m", "schemaless_store.testing.history", "--seed", SEED]
    command += [*flags, "--clients", "4", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEMALESS_TEST")}
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = done.stdout + done.stderr[-3000:]
    assert (out / "summary.json").exists(), output  # it ran to its report
    summary = json.loads((out / "summary.json").read_text())
    assert done.returncode == 0 and summary["anomalies"] == 0, output
    assert summary["failed_clients"] == [] and summary["injection_errors"] == 0, output
    return summary, output


@pytest.mark.slow
@pytest.mark.mariadb_only
def test_a_history_under_every_single_server_nemesis_has_no_anomaly(tmp_path):
    nemeses = ",".join([*FAULTS, "move", "cleaner"])
    summary, output = _history(tmp_path, "--minutes", MINUTES, "--nemesis", nemeses, timeout=400)
    assert summary["ops"]["ok"] >= MINIMUM_OK, output
    for f in WORKLOAD:
        assert summary["workload"].get(f, {}).get("ok", 0) >= 1, (f, output)
    assert summary["moves"]["completed"] >= MINIMUM_MOVES_COMPLETED, output
    assert summary["cleaner_runs"]["completed"] >= 1, output  # a remover beside the writers
    for fault in FAULTS:
        assert summary["faults"].get(fault, 0) >= 1, (fault, output)
    # The faults did what they are there for: a killed commit lost its answer, a write waited
    # on a held lock; the index, the kept versions and the claims were put to the test.
    assert summary["answers_lost_by_kill_commit"] >= 1, output
    assert summary["lock_waits_met"] >= 1, output
    assert summary["finds_proven"] >= 30 and summary["versions_read"] >= 10, output
    assert summary["claims_checked"] >= 3, output


@pytest.mark.slow
@pytest.mark.mariadb_only
def test_with_json_bodies_the_servers_partial_update_keeps_every_write_under_faults(tmp_path):
    """Issue 45, item 2's one-statement partial update (``JSON_SET`` with the receipt and the
    ``COMMIT``), under the faults that test exactly-once: sessions KILLed, commit answers
    lost after the commit, ``COMMIT`` KILLed in flight. Short (25 s of clients): the soaks
    run it for 30 minutes (docs/reliability.md)."""
    summary, output = _history(
        tmp_path,
        *("--minutes", "0.42", "--nemesis", "kill,lose-commit,kill-commit"),
        *("--codec", "json", "--no-value-index"),
        timeout=300,
    )
    assert summary["value_unindexed"] and summary["workload"].get("find") is None, output
    assert summary["updates_on_the_server"] >= 20, output
    assert summary["answers_lost_by_kill_commit"] >= 1, output
    assert summary["versions_read"] >= 10, output


def test_the_soak_command_refuses_bad_flags_before_starting_anything(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["--nemesis", "kill,flood"])
    assert "unknown nemesis flood; choose among kill, lose-commit" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="galera-node nemesis needs --galera"):
        Run(parser().parse_args(["--nemesis", "galera-node"]))
    with pytest.raises(SystemExit, match="mover-kill nemesis needs the move nemesis"):
        Run(parser().parse_args(["--nemesis", "kill,mover-kill"]))
    with pytest.raises(SystemExit, match="must be positive"):
        Run(parser().parse_args(["--clients", "0"]))
    run = Run(parser().parse_args(["--seed", "7", "--nemesis", "none", "--out", "/dev/null/x"]))
    assert run.args.nemesis == [] and run.replay().endswith("--seed 7 --nemesis none --clients 4")
    with pytest.raises(SystemExit):
        parser().parse_args(["--codec", "pickle"])
    run = Run(parser().parse_args(["--seed", "7", "--codec", "json", "--no-value-index"]))
    assert run.replay().endswith("--clients 4 --codec json --no-value-index")


def test_a_run_without_the_value_index_has_no_find_and_still_updates(
    monkeypatch,
):
    """``--codec json --no-value-index`` (what the server's one-statement partial update needs
    to be soaked): the run's index module declares only the claims' index, and its clients
    send no ``find`` but still ``update``. That the updates then take the server's route is
    the slow test above's (``updates_on_the_server``)."""
    import random
    import runpy

    from schemaless_store.testing.history import indexes, variant, workload

    monkeypatch.setenv(variant.VALUE_INDEX_ENV, "0")
    try:
        declared = runpy.run_path(indexes.__file__)  # a fresh namespace
        assert "value_index" not in declared and "claim_index" in declared
        ops = workload.Operations()
        ran: list[str] = []
        ops.process, ops.index, ops.rng, ops.epoch = "p1", 0, random.Random(3), 0.0
        ops.mine = {"reg-1": "p1-0"}
        ops.run = lambda f, key, value: ran.append(f) or "ok"  # type: ignore[method-assign]
        ops.bulk = lambda key: None  # type: ignore[method-assign]
        for _ in range(400):
            ops.step()
        assert "find" not in ran and "update" in ran
    finally:
        monkeypatch.setenv(variant.VALUE_INDEX_ENV, "1")
    assert "value_index" in runpy.run_path(indexes.__file__)


def test_a_client_tells_definite_failures_from_unknown_outcomes():
    from django.db import OperationalError

    from schemaless_store.exceptions import Conflict, EntityExists, ShardUnavailable
    from schemaless_store.models import Entity
    from schemaless_store.testing.history.client import classify

    definite = [
        Conflict([]),
        EntityExists("exists"),
        Entity.DoesNotExist("gone"),
        ShardUnavailable("shard_0", "refused"),  # a new connection refused: nothing sent
    ]
    unknown = [
        ShardUnavailable("shard_0", "lost", lost=True),  # it may have committed
        OperationalError(2013, "Lost connection to server during query"),
        RuntimeError("anything else"),
    ]
    assert [classify(exc) for exc in definite] == ["fail"] * len(definite)
    assert [classify(exc) for exc in unknown] == ["info"] * len(unknown)

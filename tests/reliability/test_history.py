"""A bounded Jepsen-style history (issue 34, schemaless_store/testing/history): four client
processes append to lists through ``modify``, save, create, delete, read a few keys and look
their values up through an index for one minute, while random store sessions are KILLed, 3%
of shard commit answers are lost after the commit landed, buckets move to a third server and
back, and a server is SIGKILLed and restarted. The checker must find no anomaly
(docs/reliability.md#the-history-checker).

The run starts throwaway servers of its own (the suite's are not touched) and takes about two
minutes. ``SCHEMALESS_HISTORY_SEED`` replays another seed; a failure prints the seed and the
replay command with the checker's report. Beside it, fast on both backends: the soak command's
bad flags, and which exceptions a client records as a definite failure. The checker's own
tests, on hand-made histories, are in test_history_checker.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from schemaless_store.testing.history.run import Run, parser

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]
SEED = os.environ.get("SCHEMALESS_HISTORY_SEED", "34")


@pytest.mark.slow
@pytest.mark.mariadb_only
def test_a_history_under_every_single_server_nemesis_has_no_anomaly(tmp_path):
    command = [
        sys.executable,
        "-m",
        "schemaless_store.testing.history",
        *("--minutes", "1", "--seed", SEED, "--clients", "4"),
        *("--nemesis", "kill,lose-commit,move,sigkill", "--out", str(tmp_path)),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEMALESS_TEST")}
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False
    )
    output = done.stdout + done.stderr[-3000:]
    assert "history: faults injected:" in output, output  # it ran to its report
    for fault in ("kill", "lose-commit", "move", "sigkill"):
        assert f" {fault} " in output.split("faults injected:")[1].splitlines()[0] + " ", output
    assert done.returncode == 0 and "anomalies: 0" in output, output
    # The index was really put to the test: finds whose answer had to hold the entity.
    proven = re.search(r"finds proven \(the answer had to hold the entity\): (\d+)", output)
    assert proven is not None and int(proven.group(1)) > 50, output


def test_the_soak_command_refuses_bad_flags_before_starting_anything(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["--nemesis", "kill,flood"])
    assert "unknown nemesis flood; choose among kill, lose-commit" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="galera-node nemesis needs --galera"):
        Run(parser().parse_args(["--nemesis", "galera-node"]))
    with pytest.raises(SystemExit, match="must be positive"):
        Run(parser().parse_args(["--clients", "0"]))
    run = Run(parser().parse_args(["--seed", "7", "--nemesis", "none", "--out", "/dev/null/x"]))
    assert run.args.nemesis == [] and run.replay().endswith("--seed 7 --nemesis none --clients 4")


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

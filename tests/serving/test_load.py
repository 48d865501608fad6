"""The CI load job (issue 37): the demo served by gunicorn (4 sync workers, CONN_MAX_AGE=60, the
near cache on) under locust's users for 30 s while a quarter of the buckets moves to a third
server and back; no 5xx (nor a dropped connection), and every acknowledged post is on the site.
``load.run`` starts its own throwaway servers; locust runs in its own process (gevent)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.mariadb_only]


def test_a_move_and_back_under_load_answers_no_5xx_and_loses_no_post(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "load.run",
            "--seconds",
            "30",
            "--fault",
            "move",
            "--fault-at",
            "0.1",
            "--seed-entries",
            "200",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    print(done.stdout[-4000:], done.stderr[-4000:])
    report = json.loads((tmp_path / "report.json").read_text())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not [b for b in report["not_2xx_3xx"] if b["status"] >= 500 or b["status"] == 0]
    assert report["acknowledged_posts"] > 0 and report["lost_posts"] == []
    moves = [line for line in report["fault_log"] if "-> exit 0: Move #" in line]
    assert len(moves) == 2, report["fault_log"]  # there and back, both done
    assert {row["name"] for row in report["pages"]} >= {"GET /", "POST /post/", "GET /e/[id]/"}
    flip = report["feed_at_flip"]  # the feed page at both flips (docs/deployment.md)
    assert len(flip["windows"]) == 2 and flip["requests"] > 0, flip

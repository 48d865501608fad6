"""The README's first command, ``bash scripts/demo.sh``, really starts the demo site.

It runs the script as a person would, on a fresh data directory and a free port, waits for the
page, checks it is the seeded feed, and stops the server (its whole process group).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT = 180  # set-up is quick when .venv exists; migrations and the seed take seconds

pytestmark = pytest.mark.slow

# Variables from this test run that would point the demo elsewhere than its embedded default.
FOREIGN = (
    "DJANGO_SETTINGS_MODULE",
    "DATABASE_URL",
    "SHARD_DATABASE_URLS",
    "FEED_LIVE_INDEXES",
    "SCHEMALESS_TEST_DATABASES",
    "DEMO_SEED_ARGS",
    "HOST",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def test_scripts_demo_sh_serves_the_seeded_feed(tmp_path):
    if settings.BACKEND != "sqlite":
        pytest.skip(
            "scripts/demo.sh runs on the embedded SQLite default whatever the backend of this "
            "run: it is tested once, in the SQLite pass"
        )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    env.update(SCHEMALESS_DATA_DIR=str(tmp_path / "var"), PORT=str(port), PYTHONUNBUFFERED="1")
    log = tmp_path / "demo.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "scripts/demo.sh"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: runserver and all go together
        )
    try:
        home = None
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while home is None:
            if process.poll() is not None:
                pytest.fail(f"scripts/demo.sh exited with {process.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no page after {STARTUP_TIMEOUT}s:\n{log.read_text()}")
            try:
                home = fetch(f"http://127.0.0.1:{port}/")
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)

        assert "<title>Everyone · schemaless_store demo</title>" in home
        assert len(re.findall(r'<article class="card entry"', home)) == 20  # a full first page
        assert 'rel="next">Older' in home
        users = fetch(f"http://127.0.0.1:{port}/users/")
        assert len(re.findall(r'href="/u/[a-z0-9_]+/">@', users)) == 20  # the default seed
        shown = log.read_text()
        assert "Seeded " in shown
        assert f"demo: open http://127.0.0.1:{port}/" in shown
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.mark.parametrize(("value", "declared"), [("", False), ("link", True), (" Link ,x", True)])
def test_feed_live_indexes_declares_the_link_index(tmp_path, value, declared):
    """The switch the README's live-index steps rely on, read as the demo project reads it."""
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    env.update(SCHEMALESS_DATA_DIR=str(tmp_path), FEED_LIVE_INDEXES=value)
    code = (
        "import django; django.setup(); from schemaless_store.indexes import registry; "
        "print(' '.join(sorted(i.name for i in registry.valid())))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "project.settings"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    feed = [
        "index_feed_email",
        "index_feed_entry",
        "index_feed_published",
        "index_feed_user_published",
        "index_feed_username",
    ]
    assert found == sorted([*feed, "index_feed_link"] if declared else feed)

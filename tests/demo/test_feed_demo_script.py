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
import urllib.parse
import urllib.request

import pytest
from django.conf import settings

from tests.support.feed import FOREIGN, ROOT

STARTUP_TIMEOUT = 180  # set-up is quick when .venv exists; migrations and the seed take seconds

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(url: str, opener: urllib.request.OpenerDirector | None = None) -> str:
    with (opener or urllib.request.build_opener()).open(url, timeout=10) as response:
        return response.read().decode()


def admin_session(base: str) -> urllib.request.OpenerDirector:
    """An HTTP client logged in to the demo's admin as admin / admin."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    form = fetch(f"{base}/admin/login/", opener)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    data = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": token, "username": "admin", "password": "admin", "next": "/admin/"}
    ).encode()
    request = urllib.request.Request(f"{base}/admin/login/", data=data, headers={"Referer": base})
    with opener.open(request, timeout=10) as response:
        assert response.url == f"{base}/admin/", "the demo's admin login failed"
    return opener


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
        # History is on in the demo: the admin's Versions page of a seeded entry shows the
        # version the seed wrote.
        base = f"http://127.0.0.1:{port}"
        entry_id = re.search(r'<article class="card entry" id="entry-([0-9a-f-]+)"', home).group(1)
        versions = fetch(
            f"{base}/admin/schemaless_store/entity/{entry_id}/versions/", admin_session(base)
        )
        assert '<tr id="version-1">' in versions
        assert "Entity history is off" not in versions

        # DEBUG is off: a missing page is the site's 404 page, not Django's debug page, and
        # runserver --insecure still serves the admin's static files.
        with pytest.raises(urllib.error.HTTPError) as missing:
            fetch(f"{base}/no-such-page/")
        assert missing.value.code == 404
        page = missing.value.read().decode()
        assert "<title>Page not found · schemaless_store demo</title>" in page
        assert "URLconf" not in page
        assert "#header" in fetch(f"{base}/static/admin/css/base.css")

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
        "import django; django.setup(); from schemaless_store.config.indexes import registry; "
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
        "index_feed_entry_comments",
        "index_feed_entry_likes",
        "index_feed_entry_user",
        "index_feed_published",
        "index_feed_username",
    ]
    assert found == sorted([*feed, "index_feed_link"] if declared else feed)

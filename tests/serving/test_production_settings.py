"""``project.production``: ``check --deploy`` is clean for it; it refuses to start without its
own SECRET_KEY and ALLOWED_HOSTS; persistent connections with health checks on every alias; and
plain HTTP (``DJANGO_PLAIN_HTTP=1``, laptops and the load test) is reported by ``--deploy``."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "SHARD_DATABASE_URLS", "SECRET_KEY", "ALLOWED_HOSTS")
    }
    environ.update(
        DJANGO_SETTINGS_MODULE="project.production", SCHEMALESS_DATA_DIR=str(tmp_path), **env
    )
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


KEY = secrets.token_urlsafe(50)


def test_check_deploy_is_clean_and_plain_http_is_reported(tmp_path):
    done = _run(
        tmp_path,
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        SECRET_KEY=KEY,
        ALLOWED_HOSTS="example.com",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
    plain = _run(
        tmp_path,
        "check",
        "--deploy",
        SECRET_KEY=KEY,
        ALLOWED_HOSTS="example.com",
        DJANGO_PLAIN_HTTP="1",
    )
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in plain.stderr + plain.stdout


def test_it_refuses_the_demo_key_and_missing_hosts(tmp_path):
    demo = _run(
        tmp_path,
        "check",
        SECRET_KEY="insecure-demo-key-change-me-for-any-real-deployment",
        ALLOWED_HOSTS="x",
    )
    assert demo.returncode != 0 and "needs SECRET_KEY" in demo.stderr
    hosts = _run(tmp_path, "check", SECRET_KEY=KEY)
    assert hosts.returncode != 0 and "needs ALLOWED_HOSTS" in hosts.stderr


def test_every_alias_keeps_its_connections_with_health_checks(tmp_path):
    code = (
        "from django.conf import settings; "
        "print(sorted({(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'])"
        " for d in settings.DATABASES.values()}))"
    )
    done = _run(tmp_path, "shell", "-c", code, SECRET_KEY=KEY, ALLOWED_HOSTS="x")
    assert done.stdout.strip().splitlines()[-1] == "[(60, True)]", done.stderr

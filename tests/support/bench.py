"""Running ``python -m bench.run --quick`` from a test: the bench brings its own MariaDB
servers, so the test only needs ``mariadbd`` installed (tests/house/test_bench_*.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from schemaless_store.testing.mariadb import MARIADBD

ROOT = Path(__file__).resolve().parents[2]


def need_mariadbd(fail_in_ci: bool = False) -> None:
    """Skip the test on a machine without ``mariadbd`` (fail instead in CI if asked)."""
    if shutil.which("mariadbd") or Path(MARIADBD).exists():
        return
    if fail_in_ci and os.environ.get("CI") == "true":
        pytest.fail("mariadbd is not installed; CI must run the bench smoke test")
    pytest.skip("mariadbd is not installed on this machine")


def run_quick(out: Path, *args: str) -> dict[str, Any]:
    """``bench.run --quick --quiet ARGS --out OUT``, which must succeed; its JSON result."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--quiet", *args, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = out.glob("quick-*.json")
    return json.loads(result.read_text())

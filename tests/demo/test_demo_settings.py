"""The demo's settings turn the entity cache, the near cache and history on and off from the
environment (docs/demo.md), as docker-compose.yml sets them."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

SETTINGS = Path(__file__).resolve().parents[2] / "project" / "settings.py"


def demo_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> dict[str, Any]:
    for name in ("DATABASE_URL", "SHARD_DATABASE_URLS", "ENTITY_CACHE_URL", "ENTITY_NEAR_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SCHEMALESS_HISTORY", raising=False)
    monkeypatch.setenv("SCHEMALESS_DATA_DIR", str(tmp_path))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS))["SCHEMALESS"]


def test_the_near_cache_and_history_follow_the_environment(monkeypatch, tmp_path):
    plain = demo_settings(monkeypatch, tmp_path)
    assert plain["HISTORY"] is True and "CACHE" not in plain and "NEAR_CACHE" not in plain
    cached = demo_settings(monkeypatch, tmp_path, ENTITY_CACHE_URL="redis://127.0.0.1:1/0")
    assert cached["CACHE"] == "entities" and "NEAR_CACHE" not in cached
    near = demo_settings(
        monkeypatch,
        tmp_path,
        ENTITY_CACHE_URL="redis://127.0.0.1:1/0",
        ENTITY_NEAR_CACHE="1",
        SCHEMALESS_HISTORY="0",
    )
    assert near["NEAR_CACHE"] == {} and near["HISTORY"] is False
    # The near cache needs the entity cache: without its URL the flag alone turns nothing on.
    assert "NEAR_CACHE" not in demo_settings(monkeypatch, tmp_path, ENTITY_NEAR_CACHE="1")

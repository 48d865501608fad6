"""The ``SCHEMALESS`` settings that hold a flag or a number (docs/configuration.md): each is
validated by its line of ``conf.RULES`` (``conf.NEAR_RULES`` for ``NEAR_CACHE``'s keys), and a
bad value raises ``ConfigurationError`` naming the key and what it may hold, which
``manage.py check`` reports as ``schemaless.E001``. No database is touched."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from schemaless_store import checks
from schemaless_store.config import conf
from schemaless_store.exceptions import ConfigurationError

# What each validated setting may hold, as the error says it: spelled out here, not read from
# the rules, so that a rule changed by mistake fails.
WANTED = {
    "BUCKETS": "a whole number >= 1",
    "MAX_BODY_BYTES": "a whole number of bytes from 1 to 16777215",
    "WRITE_RETRIES": "a whole number from 0 to 10",
    "FETCH_BATCH": "a whole number from 1 to 32766",
    "HISTORY": "True or False",
    "FEED_GAP_GRACE": "a number of seconds >= 0",
    "MAP_MAX_AGE": "a number of seconds >= 0",
    "MOVE_WAIT": "a number of seconds >= 0",
    "RECEIPT_RETENTION": "a number of seconds >= 60",
    "RECEIPT_WAIT": "a number of seconds >= 0",
    "CACHE_TIMEOUT": "a whole number of seconds >= 1",
    "READ_FROM_REPLICAS": "True or False",
    "REPLICA_MAX_LAG": "a number of seconds >= 0",
    "REPLICA_WAIT": "a number of seconds >= 0",
    "REPLICA_CHECK_INTERVAL": "a number of seconds >= 0",
    "NEAR_CACHE.MAX_ENTRIES": "a whole number >= 1",
    "NEAR_CACHE.DROP_TIMEOUT": "a number of seconds >= 0.01",
}
# The values at the edges of each range, which must be taken.
EDGES = {
    "BUCKETS": [2, 2**20],  # 1 is in range, but the two test shards need two
    "MAX_BODY_BYTES": [1, 2**24 - 1],
    "WRITE_RETRIES": [0, 10],
    "FETCH_BATCH": [1, 32_766],
    "CACHE_TIMEOUT": [1, 86_400],
    "RECEIPT_RETENTION": [60, 86_400],
    "NEAR_CACHE.MAX_ENTRIES": [1, 10**9],
    "NEAR_CACHE.DROP_TIMEOUT": [0.01, 3600],
}


def rule_of(key: str) -> conf.Rule:
    group, _, name = key.rpartition(".")
    return (conf.NEAR_RULES if group else conf.RULES)[name]


def overridden(key: str, value: Any) -> dict[str, Any]:
    """``SCHEMALESS`` with ``key`` set to ``value`` (and the entity cache on for the near
    cache's keys, which need one)."""
    group, _, name = key.rpartition(".")
    base = {**settings.SCHEMALESS}
    if group:
        return {**base, "CACHE": "default", "NEAR_CACHE": {name: value}}
    return {**base, name: value}


def bad_values(key: str) -> list[Any]:
    rule = rule_of(key)
    if rule.flag:
        return [1, 0, "yes", None, "True"]
    values: list[Any] = [rule.low - (1 if rule.whole else 0.005), "1", True, None, math.nan]
    if rule.high is not None:
        values.append(rule.high + 1)
    if rule.whole:
        values.append(rule.low + 0.5)  # in range, but not whole
    return values


def test_every_flag_and_number_setting_is_validated():
    """A setting whose default is a flag or a number has a rule, and this module tests it."""
    numeric = [
        key for key, default in conf.DEFAULTS.items() if isinstance(default, bool | int | float)
    ] + [f"NEAR_CACHE.{key}" for key in conf.NEAR_DEFAULTS]
    ruled = [*conf.RULES, *(f"NEAR_CACHE.{key}" for key in conf.NEAR_RULES)]
    assert sorted(numeric) == sorted(ruled), "give each a line of conf.RULES (or NEAR_RULES)"
    assert sorted(ruled) == sorted(WANTED), "say what each may hold in WANTED above"


@pytest.mark.parametrize("key", sorted(WANTED))
def test_a_bad_value_names_the_key_and_the_range(key):
    group, _, name = key.rpartition(".")
    shown = f"SCHEMALESS['{group}']['{name}']" if group else f"SCHEMALESS['{name}']"
    for value in bad_values(key):
        with override_settings(SCHEMALESS=overridden(key, value)):
            with pytest.raises(ConfigurationError) as raised:
                conf.get()
            assert str(raised.value) == f"{shown} must be {WANTED[key]}, not {value!r}"
            (error,) = checks.check_settings()
            assert (error.id, error.msg) == ("schemaless.E001", str(raised.value))


@pytest.mark.parametrize("key", sorted(WANTED))
def test_the_values_in_range_are_taken(key):
    rule = rule_of(key)
    values = [True, False] if rule.flag else EDGES.get(key, [0, 0.5, 3600])
    for value in values:
        with override_settings(SCHEMALESS=overridden(key, value)):
            resolved = conf.get()
        group, _, name = key.rpartition(".")
        if group:
            assert getattr(resolved.near_cache, name.lower()) == value
        else:
            assert getattr(resolved, name.lower()) == value

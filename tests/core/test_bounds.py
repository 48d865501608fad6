"""The one bounds check (schemaless_store.values.bounds): an int or a number in a range, never a
bool, never a NaN; every argument check and the settings' rules use it (no database)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from schemaless_store.cleaner.worker import Cleaner
from schemaless_store.config.conf import Rule
from schemaless_store.exceptions import ConfigurationError
from schemaless_store.values import bounds

PACKAGE = Path(__file__).resolve().parents[2] / "schemaless_store"


@pytest.mark.parametrize(
    ("value", "low", "high", "fits"),
    [
        (1, 1, None, True),
        (0, 1, None, False),
        (True, 1, None, False),
        (False, 0, None, False),
        (1.0, 1, None, False),
        ("1", 1, None, False),
        (5, 1, 5, True),
        (6, 1, 5, False),
        (-3, None, None, True),
    ],
)
def test_whole(value, low, high, fits):
    assert bounds.whole(value, low, high) is fits


@pytest.mark.parametrize(
    ("value", "kwargs", "fits"),
    [
        (0, {}, True),
        (0.5, {}, True),
        (-0.1, {}, False),
        (True, {}, False),
        (math.nan, {}, False),
        (math.nan, {"low": None}, False),
        (math.inf, {}, True),
        (0, {"above": True}, False),
        (1, {"low": 0, "high": 1, "above": True}, True),
        (1.5, {"low": 0, "high": 1}, False),
        ("1", {}, False),
    ],
)
def test_number(value, kwargs, fits):
    assert bounds.number(value, **kwargs) is fits


@pytest.mark.parametrize("name", ["interval", "lock_wait"])
@pytest.mark.parametrize("value", [True, math.nan, -1])
def test_the_cleaner_refuses_a_bool_or_a_nan_for_seconds(name, value):
    """The cleaner's copy of the check took True for 1 second and NaN for a pause."""
    with pytest.raises(ValueError, match=f"{name} must be a number of seconds"):
        Cleaner(**{name: value})


def test_a_settings_rule_asks_the_same_check():
    with pytest.raises(ConfigurationError, match="must be a whole number >= 1, not True"):
        Rule(low=1, whole=True).check("SCHEMALESS['X']", True)
    with pytest.raises(ConfigurationError, match="must be a number of seconds >= 0, not nan"):
        Rule(low=0, unit="seconds").check("SCHEMALESS['X']", math.nan)
    Rule(low=0, unit="seconds").check("SCHEMALESS['X']", 0)


def test_no_module_spells_the_check_again():
    spelled = re.compile(r"isinstance\((\w+), bool\) or not isinstance\(\1, int")
    found = [
        f"{path.relative_to(PACKAGE)}:{text[: m.start()].count(chr(10)) + 1}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for text in [path.read_text()]
        for m in spelled.finditer(text)
    ]
    assert not found, f"use schemaless_store.values.bounds: {found}"

"""``map_entities``' keywords are ``MapOptions``' fields, declared once
(schemaless_store/mapping/runner.py): a keyword it does not know, or a bad batch size, is
refused before anything runs. No database is touched."""

from __future__ import annotations

import dataclasses

import pytest

from schemaless_store.mapping import DEFAULT_BATCH_SIZE, MapOptions, map_entities


def test_the_options_and_their_defaults():
    assert {f.name: f.default for f in dataclasses.fields(MapOptions)} == {
        "where": None,
        "kind": None,
        "shards": None,
        "batch_size": DEFAULT_BATCH_SIZE,
        "sleep": 0.0,
        "duty": 1.0,
        "max_latency": None,
        "dry_run": False,
        "rewrite_bodies": False,
        "restart": False,
        "progress": False,
        "progress_file": None,
    }


def test_an_unknown_keyword_is_refused_by_name():
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['batchsize'\]"):
        map_entities("tests.support.mapfuncs.noop", batchsize=3)


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "3"])
def test_a_bad_batch_size_is_refused(size):
    with pytest.raises(ValueError, match="batch_size must be a whole number of at least 1"):
        map_entities("tests.support.mapfuncs.noop", batch_size=size)

"""The export format (schemaless_store/backup/lines.py): lines read back as what was written,
for every supported value type; every kind of bad line is refused with its reason. No DB."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemaless_store.backup import lines
from schemaless_store.backup.lines import BadLine, CellLine, End, EntityLine, Header
from tests.support.values import EVERY_TYPE, deep_same, line_values, same

bags = st.dictionaries(st.text().filter(lambda name: name != "id"), line_values, max_size=6)


@given(st.uuids(), bags)
def test_an_entity_line_reads_back_as_written(entity_id, properties):
    updated = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    text = lines.entity(entity_id.bytes, updated, properties)
    assert text.endswith("\n") and text.count("\n") == 1  # one line, whatever the values
    found = lines.read(text)
    assert isinstance(found, EntityLine)
    assert found.id == entity_id
    assert deep_same(found.properties, properties)


def test_every_type_is_legible_json():
    key = uuid.UUID(int=7).bytes
    updated = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    data = json.loads(lines.entity(key, updated, EVERY_TYPE))
    assert data["id"] == "00000000-0000-0000-0000-000000000007"
    assert data["updated"] == "2026-01-02T00:00:00+00:00"
    assert data["properties"]["uuid"] == {"$uuid": "12345678-1234-5678-1234-567812345678"}
    assert data["properties"]["bytes"] == {"$bytes": "0001feff"}
    assert data["properties"]["utc"] == {"$datetime": "2009-02-26T12:30:46.123456+00:00"}
    assert data["properties"]["inf"] == {"$float": "inf"}
    assert same(lines.read(json.dumps(data)).properties, EVERY_TYPE)


def test_a_property_called_updated_is_a_property():
    key = uuid.UUID(int=1).bytes
    stamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    found = lines.read(lines.entity(key, stamp, {"updated": 12}))
    assert found.properties == {"updated": 12}


@given(st.uuids(), st.text(min_size=1), st.integers(1, 2**63 - 1), st.none() | bags)
def test_a_cell_line_reads_back_as_written(row_key, column, ref_key, properties):
    created = dt.datetime(2026, 5, 6, 7, 8, 9, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    found = lines.read(lines.cell(row_key.bytes, column, ref_key, created, properties))
    assert isinstance(found, CellLine)
    assert (found.row_key, found.column, found.ref_key) == (row_key, column, ref_key)
    assert same(found.created_at, created)
    assert (found.properties is None) == (properties is None)
    if properties is not None:
        assert deep_same(found.properties, properties)


def test_the_first_and_last_lines():
    started = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    header = lines.read(lines.header(started, ["shard_0", "shard_1"], None, True))
    assert header == Header(started.isoformat(), ["shard_0", "shard_1"], None, True)
    assert lines.read(lines.end(5, 2)) == End(5, 2)


GOOD_ID = "12345678-1234-5678-1234-567812345678"


def test_a_repeated_key_keeps_its_last_value():
    found = lines.read('{"id": "' + GOOD_ID + '", "properties": {"a": 1, "a": 2}}')
    assert found.properties == {"a": 2}


def test_an_entity_line_needs_only_id_and_properties():
    found = lines.read('{"id": "00000000000000000000000000000009", "properties": {"a": 1}}')
    assert found == EntityLine(uuid.UUID(int=9).bytes, {"a": 1})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"id": "x", "properties": {', "invalid JSON"),
        ("[1, 2]", "a line is a JSON object, not list"),
        ('{"id": "' + GOOD_ID + '", "properties": {"a": NaN}}', "NaN is not JSON"),
        ('{"id": "' + GOOD_ID + '", "properties": {"a": {"$date": "x"}}}', "unknown tag"),
        ('{"id": "' + GOOD_ID + '", "properties": {"a": {"$uuid": "nope"}}}', "not a UUID"),
        (
            '{"id": "' + GOOD_ID + '", "properties": {"a": {"$datetime": "2020-01-01T00:00"}}}',
            "needs a UTC offset",
        ),
        ("[" * 100_000, "invalid JSON"),
        ('{"id": "not-a-uuid", "properties": {}}', "id is a UUID string"),
        ('{"id": 5, "properties": {}}', "id is a UUID string"),
        ('{"id": "' + GOOD_ID + '"}', 'needs "properties"'),
        ('{"id": "' + GOOD_ID + '", "properties": [1]}', "properties is a JSON object"),
        ('{"id": "' + GOOD_ID + '", "properties": {"id": 1}}', '"id" cannot be a property'),
        ('{"id": "' + GOOD_ID + '", "properties": {}, "extra": 1}', "unknown key 'extra'"),
        ('{"title": "no id"}', "not an entity line"),
        ('{"export": {"format": 99}}', "format 99"),
        ('{"row_key": "' + GOOD_ID + '", "column": "c"}', "a cell line needs"),
        (
            '{"row_key": "' + GOOD_ID + '", "column": "c", "ref_key": 0, "created_at": '
            '"2020-01-01T00:00:00+00:00", "properties": null}',
            "ref_key is a whole number",
        ),
    ],
)
def test_bad_lines_say_why(text, reason):
    with pytest.raises(BadLine, match=reason.replace("(", r"\(")):
        lines.read(text)

"""Values as the admin shows them in HTML (no database): the entity list's preview, an
entity's body with links to the entities its ids name, and the dates of time-like numbers."""

from __future__ import annotations

import html
import re
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemaless_store.admin.timestamps import time_note
from schemaless_store.admin.values_html import (
    PREVIEW_CHARS,
    body_html,
    entity_ids,
    preview,
    value_html,
)
from schemaless_store.values import jsonview
from tests.support.values import EVERY_TYPE, json_values


def text_of(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_preview_shows_each_property_as_name_and_json_value():
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    shown = preview({"kind": "entry", "user_id": ident, "n": 1, "ok": True})
    assert shown.html.count('class="sls-prop"') == 4
    expected = 'kind: "entry" · user_id: {"$uuid": "12345678-1234-5678-1234-567812345678"} · n: 1'
    assert text_of(shown.html) == expected + " · ok: true"
    assert shown.text == text_of(shown.html)


def test_preview_escapes_names_and_values():
    shown = preview({"<b>": "<script>alert(1)</script> & co"})
    assert "<script>" not in shown.html and "<b>" not in shown.html
    assert "&lt;script&gt;" in shown.html
    assert text_of(shown.html) == '<b>: "<script>alert(1)</script> & co"'


def test_a_long_body_is_cut_and_marked_the_tooltip_holds_more():
    props = {f"p{n}": "x" * 60 for n in range(40)}
    shown = preview(props)
    text = text_of(shown.html)
    assert len(text) <= PREVIEW_CHARS + 20
    assert text.endswith("…")
    assert len(shown.text) > len(text) and len(shown.text) <= 1000
    assert shown.text.startswith(text.split("…")[0])


def test_one_huge_value_is_cut_inside_the_value():
    shown = preview({"title": "y" * 5000, "after": 1})
    text = text_of(shown.html)
    assert text.startswith('title: "yyyy') and text.endswith("…")
    assert len(text) <= PREVIEW_CHARS + 10


def test_an_empty_body_previews_as_nothing():
    shown = preview({})
    assert shown.html == "" and shown.text == ""


# --- the body as HTML: the same text as jsonview.dumps, with links and dates -----------------


def linker(text: str) -> str:
    return f"/e/{text}/"


@pytest.mark.parametrize(
    "props",
    [
        EVERY_TYPE,
        {},
        {"$uuid": "a property named $uuid is not a tag"},
        {"published": 1_700_000_000_123_456, "tags": [], "meta": {}, "n": -0.0},
        {"created_at": [1_700_000_000, 5], "d": {uuid.UUID(int=7): {"joined": 1_700_000_000}}},
        {"nan": float("nan"), "inf": float("-inf"), "odd": {"$x": 1}, "esc": "<a href='x'>&"},
    ],
)
def test_body_html_reads_exactly_as_the_json_view(props):
    markup = body_html(props, link=linker)
    assert text_of(markup) == jsonview.dumps(props)
    assert "<a href='x'>" not in markup


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_body_html_reads_exactly_as_the_json_view_always(props):
    assert text_of(body_html(props, link=linker)) == jsonview.dumps(props)
    for name, value in props.items():
        assert text_of(value_html(name, value, link=linker)) == jsonview.dumps_value(value)


def test_ids_link_to_their_entities_and_unknown_ids_stay_text():
    known, unknown = uuid.uuid4(), uuid.uuid4()
    markup = body_html(
        {"user_id": known, "friends": [unknown, known], "raw": str(known)},
        link=lambda text: linker(text) if text == str(known) else None,
    )
    assert markup.count(f'<a class="sls-ref" href="/e/{known}/"') == 2
    assert str(unknown) in markup and f"/e/{unknown}/" not in markup
    # A string that happens to hold a UUID is text, not an id.
    assert f'"raw": "{known}"' in text_of(markup)
    assert entity_ids({"a": known, "b": [unknown, {"k": known}], "c": {unknown: 1}}) in (
        [known, unknown],
        [unknown, known],
    )


def test_time_notes_sit_at_the_end_of_the_line_outside_the_text():
    markup = body_html({"published": 1_700_000_000_123_456, "title": "x"})
    assert (
        '&quot;published&quot;: 1700000000123456,<span class="sls-when" '
        'data-when="2023-11-14 22:13:20.123456 UTC" '
        'title="microseconds since 1970-01-01 UTC"></span>\n'
    ) in markup
    compact = value_html("joined_at", 1_700_000_000)
    assert compact == (
        '<span class="sls-time" title="2023-11-14 22:13:20 UTC (seconds)">1700000000</span>'
    )


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("published", 1_700_000_000, ("2023-11-14 22:13:20 UTC", "seconds")),
        ("created", 1_700_000_000_123, ("2023-11-14 22:13:20.123 UTC", "milliseconds")),
        ("created_us", 1_700_000_000_000_001, ("2023-11-14 22:13:20.000001 UTC", "microseconds")),
        ("joined", 1_700_000_000_000_000_007, ("2023-11-14 22:13:20.000000007 UTC", "nanoseconds")),
        ("last_login_at", 946_684_800, ("2000-01-01 00:00:00 UTC", "seconds")),
        ("createdAt", 4_102_444_799_999, ("2099-12-31 23:59:59.999 UTC", "milliseconds")),
        ("startTime", 1_700_000_000.25, ("2023-11-14 22:13:20.25 UTC", "seconds")),
        ("updated", 1_700_000_000.0, ("2023-11-14 22:13:20 UTC", "seconds")),
        # One half of the rule is not enough:
        ("published", 5, None),  # named like a time, but 1970: a flag or a count
        ("published", 946_684_799, None),  # 1999-12-31 23:59:59: before the range
        ("published", 4_102_444_800, None),  # 2100-01-01: after the range
        ("published", 10**13, None),  # between the millisecond and microsecond ranges
        ("views", 1_700_000_000, None),  # the size of a time, but not named like one
        ("published", True, None),
        ("published", "1700000000", None),
        ("published", float("inf"), None),
        ("publisher", 1_700_000_000, None),
    ],
)
def test_the_time_rule(name, value, shown):
    assert time_note(name, value) == shown

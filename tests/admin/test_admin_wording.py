"""What the admin says, said once and said plainly: the versions page with history off, relative
times ("just now", never "0 minutes ago"), and a "check now" sample size that was clamped, empty
or not a number."""

from __future__ import annotations

import datetime as dt
import html
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from schemaless_store.admin.health import sample_size
from schemaless_store.models import CleanerPass, Entity
from schemaless_store.templatetags.schemaless_admin import ago
from tests.support import STORE
from tests.support.admin import CHANGE_PERMS, CHECK, HEALTH, LIST, client_for


def page_text(response) -> str:
    return html.unescape(response.content.decode())


def messages_of(response) -> list[tuple[str, str]]:
    """(level, text) of each message shown on the page."""
    found = re.findall(r'<li class="(\w+)">(.*?)</li>', response.content.decode(), re.DOTALL)
    return [(level, html.unescape(text).strip()) for level, text in found]


# --- history off ---------------------------------------------------------------------------------


@STORE
def test_with_history_off_the_versions_page_says_so_once(settings):
    settings.SCHEMALESS = {**settings.SCHEMALESS, "HISTORY": False}
    entity = Entity.objects.create(title="t")
    response = client_for("view_entity").get(f"{LIST}{entity.id}/versions/")
    text = page_text(response)
    assert response.status_code == 200
    assert len(re.findall("history is off", text, re.IGNORECASE)) == 1
    assert "Entity history is off: set SCHEMALESS['HISTORY'] = True to keep every version." in text


# --- relative times ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "words"),
    [
        (dt.timedelta(0), "just now"),
        (dt.timedelta(seconds=-59), "just now"),
        (dt.timedelta(seconds=20), "just now"),  # a clock a little ahead: not "in 0 minutes"
        (dt.timedelta(minutes=-5, seconds=-10), "5 minutes ago"),
        (dt.timedelta(hours=-3, minutes=-2), "3 hours, 2 minutes ago"),
        (dt.timedelta(minutes=10, seconds=30), "in 10 minutes"),
    ],
)
def test_ago(offset, words):
    assert ago(timezone.now() + offset).replace("\xa0", " ") == words  # timesince: nbsp


def test_ago_of_nothing_is_nothing():
    assert ago(None) == ""


@STORE
def test_the_health_page_says_just_now_not_zero_minutes_ago():
    CleanerPass.objects.create(index_name="index_link", shard="shard_0", kind="repair")
    client = client_for(*CHANGE_PERMS)
    client.post(CHECK, {"sample": "5"})
    text = page_text(client.get(HEALTH))
    assert "0 minutes" not in text
    # The pass in the overview and in its shard's row, and the last check in both places.
    assert text.count("just now") >= 4


# --- the "check now" sample size -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "used", "said"),
    [
        ("250", 250, ""),
        (" 7 ", 7, ""),
        ("5000", 5000, ""),
        ("999999", 5000, "A sample of 999999 is over the most a check takes, 5,000 per shard"),
        ("0", 1, "A sample of 0 is under the least, 1 per shard: checked 1."),
        ("-3", 1, "A sample of -3 is under the least"),
        ("", 100, "No sample size given: checked the default, 100."),
        ("abc", None, "The sample size 'abc' is not a whole number: give 1 to 5,000"),
        ("2.5", None, "'2.5' is not a whole number"),
        ("9" * 5000, None, "is not a whole number"),  # past int()'s digit limit: refused
    ],
)
def test_sample_size_is_clamped_and_says_so(typed, used, said):
    size, note = sample_size(typed)
    assert size == used
    assert note.startswith(said) if said.startswith(("A ", "No ", "The ")) else said in note
    assert (note == "") == (said == "")
    assert len(note) < 200


@STORE
def test_check_now_says_when_it_clamped_and_refuses_text():
    Entity.objects.create(link="https://a")
    client = client_for(*CHANGE_PERMS)

    response = client.post(CHECK, {"sample": "999999", "index": "index_link"}, follow=True)
    shown = messages_of(response)
    assert shown[0] == (
        "warning",
        "A sample of 999999 is over the most a check takes, 5,000 per shard: checked 5,000.",
    )
    assert "(up to 5000 per shard)" in shown[1][1] and shown[1][0] == "success"

    response = client.post(CHECK, {"sample": "abc", "index": "index_link"}, follow=True)
    assert messages_of(response) == [
        (
            "error",
            "The sample size 'abc' is not a whole number: give 1 to 5,000 entities per shard. "
            "Nothing was checked.",
        )
    ]
    assert LogEntry.objects.filter(object_id="index_link").count() == 1  # only the first check

    response = client.post(CHECK, {"sample": "40", "index": "index_link"}, follow=True)
    shown = messages_of(response)
    assert len(shown) == 1 and shown[0][0] == "success" and "(up to 40 per shard)" in shown[0][1]

"""``dumpdata`` and ``loaddata`` of kinds (issue 44 item 6, docs/kinds.md#fixtures): a round
trip with every value's type, and the refusals that say what to do."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from schemaless_store.models import Entity
from tests.kindsapp.models import Author, Book, Note, Tag
from tests.support import STORE

pytestmark = STORE


def dumped(*labels, **options):
    out = io.StringIO()
    call_command("dumpdata", *labels, stdout=out, **options)
    return out.getvalue()


def test_dumpdata_and_loaddata_round_trip_kinds(tmp_path):
    ada = Author.objects.create(name="Ada")
    book = Book.objects.create(
        title="t",
        published=dt.date(2002, 1, 1),
        price=decimal.Decimal("9.50"),
        isbn=uuid.uuid4(),
        author=ada,
    )
    tag = Tag.objects.create(name="x", user_id=uuid.uuid4(), extra=b"\x00\xff", n=[1, 2.5])
    before = {e.id: e.properties for e in (ada, book, tag)}
    text = dumped("kindsapp.Author", "kindsapp.Book", "kindsapp.Tag", indent=2)
    objects = json.loads(text)
    assert {o["model"] for o in objects} == {"kindsapp.author", "kindsapp.book", "kindsapp.tag"}
    assert next(o for o in objects if o["pk"] == str(book.id))["fields"]["title"] == "t"
    for entity in (ada, book, tag):
        entity.delete()
    fixture = tmp_path / "library.json"
    fixture.write_text(text)
    out = io.StringIO()
    call_command("loaddata", str(fixture), stdout=out)
    assert "Installed 3 object(s) from 1 fixture(s)" in out.getvalue()
    after = Entity.objects.get_many(before)
    assert {key: entity.properties for key, entity in after.items()} == before
    assert Book.objects.get(title="t").author == ada  # and the index rows are back
    call_command("loaddata", str(fixture), stdout=io.StringIO())  # again: replaced, not doubled
    assert Book.objects.count() == 1 and Author.objects.count() == 1


def test_dumpdata_of_an_app_of_kinds_dumps_them_all():
    Note.objects.create(title="n")
    Author.objects.create(name="Ada")
    assert {o["model"] for o in json.loads(dumped("kindsapp"))} == {
        "kindsapp.note",
        "kindsapp.author",
    }


def test_what_cannot_be_dumped_or_loaded_is_refused_with_the_fix(tmp_path):
    with pytest.raises(CommandError, match="dump them apart from auth"):
        dumped("kindsapp.Book", "auth")
    with pytest.raises(CommandError, match="writes JSON"):
        dumped("kindsapp.Book", format="xml")
    mixed = tmp_path / "mixed.json"
    mixed.write_text(
        json.dumps(
            [
                {"model": "kindsapp.author", "pk": str(uuid.uuid4()), "fields": {"name": "A"}},
                {"model": "auth.group", "pk": 1, "fields": {"name": "g", "permissions": []}},
            ]
        )
    )
    with pytest.raises(CommandError, match="mixes kinds' entities"):
        call_command("loaddata", str(mixed), stdout=io.StringIO())
    invalid = tmp_path / "invalid.json"
    invalid.write_text(
        json.dumps([{"model": "kindsapp.book", "pk": str(uuid.uuid4()), "fields": {"stars": 1}}])
    )
    with pytest.raises(CommandError, match="a Book in it is invalid, nothing of it was written"):
        call_command("loaddata", str(invalid), stdout=io.StringIO())
    assert Author.objects.count() == 0 and Book.objects.count() == 0

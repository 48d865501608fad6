"""A kind's admin change pages and checks (issue 44, item 4): "View on site", every write-time
refusal as a form error (never a 500), a ``ModelForm``'s ``is_valid()`` catching what ``save()``
would refuse, and the system checks refusing a ``list_filter``, ``search_fields`` or
``ordering`` no index serves."""

from __future__ import annotations

import uuid

import pytest
from django import forms
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from schemaless_store.exceptions import IndexValueTooLong
from schemaless_store.kinds.admin import KindAdmin
from tests.facesapp.models import Novel
from tests.support import STORE

pytestmark = STORE

LIST = "/admin/facesapp/novel/"
VALID = {"title": "Dune", "genre": "sf", "isbn": "111", "stars": "4", "in_print": "on"}


class NovelForm(forms.ModelForm):
    class Meta:
        model = Novel
        fields = ["title", "genre", "isbn", "stars"]


def test_view_on_site_opens_the_instances_page(admin_client):
    novel = Novel.objects.create(title="Dune", isbn="111")
    page = admin_client.get(f"{LIST}{novel.id}/change/")
    assert page.status_code == 200
    assert f'href="/novels/{novel.id}/" class="viewsitelink"' in page.content.decode()
    assert admin_client.get(f"/novels/{novel.id}/").content.decode() == f"novel {novel.id}"
    # Django's own redirect through the content type reads the entity too.
    kind = ContentType.objects.get_for_model(Novel, for_concrete_model=False)
    shortcut = admin_client.get(f"/admin/r/{kind.id}/{novel.id}/")
    assert shortcut.status_code == 302 and shortcut["Location"].endswith(f"/novels/{novel.id}/")
    assert admin_client.get(f"/admin/r/{kind.id}/{uuid.uuid4()}/").status_code == 404


def test_a_value_too_long_for_its_index_is_a_form_error(admin_client):
    long_title = "x" * 60  # within max_length=200; the index column holds 40 bytes
    response = admin_client.post(f"{LIST}add/", {**VALID, "title": long_title})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["title"]
    assert "too long for the index" in errors["title"][0]
    assert "index_novel_title" in errors["title"][0]
    assert Novel.objects.all().count() == 0 and not LogEntry.objects.exists()


def test_a_write_time_refusal_after_a_valid_form_is_a_form_error(admin_client, monkeypatch):
    """The index refuses at the write (the form's check is skipped here, as a racing change
    of the index would): the form again with the error, nothing written, no 500."""
    monkeypatch.setattr(Novel, "validate_constraints", lambda self, exclude=None: None)
    response = admin_client.post(f"{LIST}add/", {**VALID, "title": "y" * 60})
    assert response.status_code == 200
    assert "too long for the index" in response.context["adminform"].form.errors["title"][0]
    assert Novel.objects.all().count() == 0


def test_a_model_form_is_valid_only_if_save_would_write():
    Novel.objects.create(title="Held", isbn="999")
    too_long = NovelForm(data={**VALID, "title": "z" * 60})
    assert not too_long.is_valid() and "too long for the index" in too_long.errors["title"][0]
    taken = NovelForm(data={**VALID, "isbn": "999"})
    assert not taken.is_valid()
    assert taken.errors == {"isbn": ["Novel with this Isbn already exists."]}
    fine = NovelForm(data=VALID)
    assert fine.is_valid()
    fine.save()
    with pytest.raises(IndexValueTooLong):  # save() alone still refuses (the write does)
        Novel(title="w" * 60, isbn="5").save()
    again = NovelForm(data=VALID, instance=Novel.objects.get(id=fine.instance.id))
    assert again.is_valid()  # its own unique value is not a clash


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    changes=st.dictionaries(
        st.sampled_from(
            ["title", "genre", "isbn", "stars", "in_print", "published_0", "published_1", "loaded"]
        ),
        st.text(max_size=80) | st.sampled_from(["x" * 41, "sf", "0", "2020-01-01", "12:00"]),
        max_size=4,
    ),
    isbn=st.integers(0, 10**6),
)
@example(changes={"title": "x" * 41}, isbn=7)  # a 500 before issue 44 (IndexValueTooLong)
def test_no_form_body_gives_a_500(admin_client, changes, isbn):
    """A valid body with some fields replaced by anything (a title too long for its index
    included): a form error or a save, never a server error."""
    body = {**VALID, "isbn": str(isbn), **changes}
    assert admin_client.post(f"{LIST}add/", body).status_code in (200, 302)


def check_ids(**options) -> list[str]:
    bad = type("BadAdmin", (KindAdmin,), options)
    return [error.id for error in bad(Novel, admin.site).check()]


def test_system_checks_refuse_what_no_index_serves():
    assert check_ids(list_filter=["genre", "in_print", "published"]) == []
    assert check_ids(list_filter=["isbn"]) == ["schemaless.E411"]  # no choices, not a date
    assert check_ids(list_filter=["stars"]) == ["schemaless.E411"]
    assert check_ids(search_fields=["=isbn", "^title"]) == []
    assert check_ids(search_fields=["title"]) == ["schemaless.E413"]  # icontains
    assert check_ids(search_fields=["=genre"]) == []  # [genre, published] orders by published
    assert check_ids(ordering=["-published"]) == []
    assert check_ids(ordering=["genre"]) == ["schemaless.E415"]
    assert check_ids(date_hierarchy="published") == ["schemaless.E416"]
    assert check_ids(list_display=["title", "stars"], list_editable=["stars"]) == [
        "schemaless.E416"
    ]
    bad = type("BadAdmin", (KindAdmin,), {"search_fields": ["title"]})
    (error,) = bad(Novel, admin.site).check()
    assert "kind Novel" in error.msg and "'^title'" in error.hint


def test_a_filter_no_index_serves_is_refused_by_the_check():
    from tests.kindsapp.models import Note

    bad = type("NoteAdmin", (KindAdmin,), {"list_filter": ["color"]})
    (error,) = bad(Note, admin.site).check()
    assert error.id == "schemaless.E412"
    assert "kind Note" in error.msg
    assert "Index('index_note_color', ['color'], shard_on='color')" in error.hint


def test_the_checks_read_no_database(monkeypatch):
    """``manage.py check`` (and ``makemigrations``) runs them before the store's tables exist:
    whether an index serves is the planner's own test of the declarations."""
    from schemaless_store.tables import lifecycle

    def no_database():
        raise AssertionError("a system check read the indexes' states")

    monkeypatch.setattr(lifecycle, "states", no_database)
    assert check_ids(list_filter=["genre", "stars"], search_fields=["=genre", "=isbn"]) == [
        "schemaless.E411"
    ]
    assert check_ids(search_fields=["=stars", "=in_print", "^nope"]) == ["schemaless.E413"]
    from tests.kindsapp.models import Note

    bad = type("NoteAdmin", (KindAdmin,), {"list_filter": ["color"], "search_fields": ["=body"]})
    assert [e.id for e in bad(Note, admin.site).check()] == ["schemaless.E412", "schemaless.E414"]

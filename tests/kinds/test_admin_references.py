"""References in a kind's admin (issue 44, items 3 and 4): the list links the referenced
entity, read for the whole page in one ``get_many``; the change page edits the id in Django's
raw-id widget, whose lookup opens the referenced kind's list as a popup that chooses an id;
an id that is no entity of the kind is a form error."""

from __future__ import annotations

import re
import uuid

from tests.facesapp.models import Critique, Novel
from tests.support import STORE

pytestmark = STORE

LIST = "/admin/facesapp/critique/"


def test_the_list_links_references_read_in_one_batch(admin_client, monkeypatch):
    novels = [Novel.objects.create(title=f"Novel {n}", isbn=str(n)) for n in range(3)]
    for novel in novels:
        Critique.objects.create(novel=novel, text=f"on {novel.title}")
    gone = Novel.objects.create(title="Gone", isbn="gone")
    dangling = Critique.objects.create(novel=gone, text="lost")
    gone.delete()  # the reference is left dangling (the documented rule)
    calls = []
    get_many = type(Novel.objects).get_many

    def counted(self, ids):
        calls.append(list(ids))
        return get_many(self, ids)

    monkeypatch.setattr(type(Novel.objects), "get_many", counted)
    text = admin_client.get(LIST).content.decode()
    for novel in novels:
        assert (
            f'<a href="/admin/facesapp/novel/{novel.id}/change/">Novel {novel.title[-1]}</a>'
            in text
        )
    assert f"{dangling.novel_id} (no such entity)" in text
    assert len(calls) == 1 and len(calls[0]) == 4  # one batch for the page


def test_the_change_page_edits_the_id_in_a_raw_id_widget(admin_client):
    novel = Novel.objects.create(title="Dune", isbn="1")
    critique = Critique.objects.create(novel=novel, text="great")
    page = admin_client.get(f"{LIST}{critique.id}/change/").content.decode()
    box = re.search(r'<input type="text" name="novel"[^>]*>', page).group(0)
    assert f'value="{novel.id}"' in box and "vForeignKeyRawIdAdminField" in box
    assert 'href="/admin/facesapp/novel/?_to_field=id" class="related-lookup"' in page
    assert f'<strong><a href="/admin/facesapp/novel/{novel.id}/change/">Dune</a></strong>' in page
    other = Novel.objects.create(title="Emma", isbn="2")
    saved = admin_client.post(
        f"{LIST}{critique.id}/change/",
        {
            "novel": str(other.id),
            "text": "changed",
            "loaded": re.search(r'name="loaded" value="([^"]*)"', page).group(1),
        },
    )
    assert saved.status_code == 302
    assert Critique.objects.get(pk=critique.id).novel == other
    # An id of no novel is the field's error, the widget keeping what was typed.
    response = admin_client.post(f"{LIST}add/", {"novel": str(uuid.uuid4()), "text": "x"})
    assert response.status_code == 200
    assert "There is no Novel with id" in response.context["adminform"].form.errors["novel"][0]
    assert "vForeignKeyRawIdAdminField" in response.content.decode()
    assert Critique.objects.count() == 1


def test_the_lookup_popup_chooses_an_id(admin_client):
    novel = Novel.objects.create(title="Dune", isbn="1")
    popup = admin_client.get("/admin/facesapp/novel/", {"_popup": "1", "_to_field": "id"})
    text = popup.content.decode()
    assert f'<a href="#" data-popup-opener="{novel.id}">Dune</a>' in text
    assert 'name="action"' not in text  # no actions in a popup
    assert '<input type="hidden" name="_popup" value="1">' in text  # kept by the search

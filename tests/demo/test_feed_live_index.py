"""The demo feed's live index (project/feed, docs/demo.md) through Django's test client: the
"who else shared this link" page before its index is declared, while it builds, and after
``runcleaner``, paging with the link kept."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command

from project.feed.models import LINK_INDEX_NAME, Entry, User
from schemaless_store.tables import lifecycle
from tests.demo.test_feed_views import entry_ids, pager_href
from tests.support import STORE
from tests.support.feed import SHARED

pytestmark = [STORE, pytest.mark.usefixtures("feed_pages")]


def test_the_page_needing_an_undeclared_index_says_how_to_add_it(client, undeclared, sharers):
    response = client.get("/shared/", {"link": SHARED})
    assert response.status_code == 503
    html = response.content.decode()
    assert 'id="index-missing"' in html
    assert "FEED_LIVE_INDEXES=link bash scripts/demo.sh" in html
    assert f"manage.py \\\n    runcleaner --index={LINK_INDEX_NAME} --once" in html
    assert client.get("/shared/").status_code == 400  # no link given


def test_the_live_index_works_after_runcleaner(client, sharers, declared_live):
    assert lifecycle.states(refresh=True)[LINK_INDEX_NAME] == lifecycle.BUILDING
    response = client.get("/shared/", {"link": SHARED})
    assert response.status_code == 503
    assert 'id="index-building"' in response.content.decode()

    # Posted while the index builds: the site's writes maintain it from the moment it is declared.
    late = Entry.objects.create(user=User.named("sharer1"), title="Again", link=SHARED)
    out = StringIO()
    call_command("runcleaner", f"--index={LINK_INDEX_NAME}", "--once", stdout=out)
    assert "it is ready" in out.getvalue()

    response = client.get("/shared/", {"link": SHARED})
    assert response.status_code == 200
    seen = entry_ids(response.content.decode())
    assert seen == [str(e.id) for e in [*sharers, late]]  # first shared first
    assert f"through the index <code>{LINK_INDEX_NAME}</code>" in response.content.decode()


def test_the_live_index_pages_with_the_link_kept(client, sharers, declared_live, settings):
    settings.FEED_PAGE_SIZE = 2
    call_command("runcleaner", f"--index={LINK_INDEX_NAME}", "--once", verbosity=0)
    html = client.get("/shared/", {"link": SHARED}).content.decode()
    assert len(entry_ids(html)) == 2
    assert 'href="?link=https%3A%2F%2Ffriendfeed.com%2F&amp;after=' in html
    too_long = client.get("/shared/", {"link": "https://example.com/" + "a" * 300})
    assert too_long.status_code == 400  # longer than an index column: refused, not a 500
    href = re.search(r'href="(\?link=[^"]+)" id="older"', html).group(1)
    response = client.get("/shared/" + href.replace("&amp;", "&"))
    assert entry_ids(response.content.decode()) == [str(sharers[2].id)]
    newer = pager_href(response.content.decode(), "newer")  # back to the first page, same link
    assert newer == "?link=https%3A%2F%2Ffriendfeed.com%2F"
    assert entry_ids(client.get("/shared/" + newer).content.decode()) == entry_ids(html)

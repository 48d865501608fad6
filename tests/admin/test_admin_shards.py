"""The admin's "Shards and buckets" page: the map as a bar of buckets coloured by shard, what
each shard holds and serves, moves in progress and past moves (docs/admin.md)."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

from schemaless_store.tables import buckets as bucket_table
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.admin import client_for
from tests.support.factories import NumberedFactory

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]

PAGE = "/admin/schemaless_store/bucketmove/"


@pytest.mark.parametrize(
    ("perms", "staff", "status"),
    [((), False, 302), ((), True, 403), (("view_bucketmove",), True, 200)],
)
def test_only_staff_with_the_view_permission_see_it(perms, staff, status):
    assert client_for(*perms, staff=staff).get(PAGE).status_code == status


def test_the_page_is_linked_from_the_admin_index():
    index = client_for("view_bucketmove").get("/admin/").content.decode()
    assert f'href="{PAGE}"' in index and "Shards and buckets" in index


def test_it_draws_the_map_and_lists_shards_and_moves():
    NumberedFactory.create_batch(20)
    first, second = shards.shard_aliases()[:2]
    client = client_for("view_bucketmove")
    page = client.get(PAGE).content.decode()
    bar = re.search(r'<div class="sls-bucket-bar".*?</div>', page, re.S).group(0)
    assert re.findall(r'data-alias="(\w+)"', bar) == [first, second]
    assert 'title="shard_0: buckets 0-2047"' in bar
    assert "Moves in progress" in page and "None. Move buckets with" in page
    out = io.StringIO()
    call_command("movebuckets", "--to", second, "--buckets", "0-99", stdout=out, stderr=out)
    page = client.get(PAGE).content.decode()
    bar = re.search(r'<div class="sls-bucket-bar".*?</div>', page, re.S).group(0)
    assert re.findall(r'data-alias="(\w+)"', bar) == [second, first, second]
    assert f'title="{second}: buckets 0-99"' in bar
    past = re.search(r'<table id="past-moves">.*?</table>', page, re.S).group(0)
    assert f"<td>{second}</td>" in past and "<td>done</td>" in past and " s</td>" in past
    shards_table = re.search(r'<table id="shards">.*?</table>', page, re.S).group(0)
    assert "100 gone" in shards_table and "1948 owned" in shards_table
    # A shard whose own table does not serve what the map gives it is named.
    bucket_table.set_states(second, [5], None)
    page = client.get(PAGE).content.decode()
    assert "its table does not serve 1 of the buckets the map gives it" in page

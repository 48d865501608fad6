"""A corrupted or truncated body in the database: reads raise a clear error naming the entity;
the admin and the cleaner report it and go on with the other entities."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import connections

from schemaless_store.exceptions import CorruptBody
from schemaless_store.models import Entity
from tests.conftest import STORE
from tests.factories import PostFactory
from tests.invariants import assert_exact
from tests.reliability_report import record
from tests.test_admin import client_for

pytestmark = [STORE, pytest.mark.reliability]


def damage(entity: Entity, body: bytes) -> None:
    with connections[entity.shard].cursor() as cursor:
        cursor.execute("UPDATE entities SET body = %s WHERE id = %s", [body, entity.row_id])


@pytest.mark.parametrize(
    "how",
    ["truncated", "garbage", "unknown format", "not a dict"],
)
def test_a_damaged_body_is_reported_and_skipped(how):
    posts = Entity.objects.bulk_put([PostFactory() for _ in range(6)])
    victim = posts[0]
    good = bytes(Entity.objects.get(id=victim.id).row_body)
    body = {
        "truncated": good[: len(good) // 2],
        "garbage": b"\x01\xc1\xc1\xc1",
        "unknown format": b"\x7f" + good[1:],
        "not a dict": b"\x01\x93\x01\x02\x03",  # a MessagePack list
    }[how]
    damage(victim, body)

    with pytest.raises(CorruptBody, match=str(victim.id)):
        Entity.objects.get(id=victim.id)["title"]

    client = client_for("view_entity")
    listing = client.get("/admin/schemaless_store/entity/")
    page = client.get(f"/admin/schemaless_store/entity/{victim.id}/change/")
    assert listing.status_code == 200 and page.status_code == 200
    # The page shows the entity's id and why its body cannot be read, instead of failing.
    assert f"entity {victim.id}: " in page.content.decode()

    out, err = io.StringIO(), io.StringIO()
    call_command("runcleaner", "--once", "-v", "1", stdout=out, stderr=err)
    report = out.getvalue() + err.getvalue()
    assert f"entity {victim.id.hex} on {victim.shard} has a corrupt body" in report
    assert "skipped" in report
    damage(victim, good)  # the others were cleaned normally: the indexes are exact
    assert_exact()
    record(f"Damaged entity body, {how} (get, admin, cleaner)", 1, 0, 0)

"""``manage.py shardmap --id UUID`` and the admin's entity page say where an entity lives: its
bucket, the shard that owns it, that shard's server (no credentials), what the shard's bucket
table says, and whether a move is under way for it (issue 37)."""

from __future__ import annotations

import io
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from schemaless_store.models import Entity
from schemaless_store.moves import plan
from schemaless_store.topology import bucket_map
from schemaless_store.values.bucket_hash import bucket_of
from tests.support import STORE
from tests.support.admin import VIEW, change_url, client_for
from tests.support.buckets import id_in_bucket, other_alias

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def shardmap(*args: str) -> str:
    out = io.StringIO()
    call_command("shardmap", *args, stdout=out)
    return out.getvalue()


def test_shardmap_id_names_bucket_shard_server_and_no_move():
    entity = Entity.objects.create(title="where")
    number = bucket_of(entity.id.bytes, 4096)
    owner = bucket_map.alias_for(entity.id.bytes)
    text = shardmap("--id", str(entity.id))
    assert f"entity {entity.id}" in text
    assert f"bucket: {number} of 4096" in text
    assert f"shard: {owner} (map version " in text
    settings = connections[owner].settings_dict
    if connections[owner].vendor == "mysql":
        assert f"server: {settings['HOST']}:{settings['PORT']}/{settings['NAME']}" in text
        assert str(settings.get("PASSWORD") or "no-password-set") not in text
    else:
        assert f"server: SQLite file {settings['NAME']}" in text
    assert "the shard's bucket table: owned" in text
    assert "move: no move is under way for this bucket" in text


def test_shardmap_id_names_the_move_under_way_for_the_bucket():
    entity_id = id_in_bucket(7)
    source = bucket_map.alias_for(entity_id.bytes)
    target = other_alias(source)
    move = plan.start(plan.plan(target, [7]))  # recorded, not yet run
    text = shardmap("--id", str(entity_id))
    assert f"move: move #{move.pk} to {target} is copying" in text
    assert f"shard: {source} " in text  # the owner until the flip
    other = id_in_bucket(8)
    assert "move: no move is under way" in shardmap("--id", str(other))
    call_command("movebuckets", "--abort", stdout=io.StringIO())


def test_shardmap_id_refuses_what_is_not_a_uuid():
    with pytest.raises(CommandError, match="--id 'nope' is not a UUID"):
        shardmap("--id", "nope")
    assert f"entity {uuid.UUID(int=5)}" in shardmap("--id", str(uuid.UUID(int=5)))  # none stored


def test_the_admin_entity_page_says_the_same():
    entity = Entity.objects.create(title="where")
    owner = bucket_map.alias_for(entity.id.bytes)
    page = client_for(*VIEW).get(change_url(entity)).content.decode()
    assert f"{bucket_of(entity.id.bytes, 4096)} <span" in page
    assert 'id="location-server"' in page
    assert "owned" in page
    assert "no move is under way for this bucket" in page
    assert owner in page

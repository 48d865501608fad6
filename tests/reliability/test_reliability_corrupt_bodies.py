"""Hostile and bad input (issue 8), **corrupt bodies**: bytes written straight into
``entities.body``. Reading the entity raises ``CorruptBody`` naming it; the admin's list
and detail pages still render and show the problem; ``runcleaner --once`` reports and
skips it and repairs every other entity.

Measured in ``tests.support.reliability_report.recording`` (its row is recorded, with what
it counted, before the test fails); docs/reliability.md lists the classes."""

from __future__ import annotations

import io
import os
from collections.abc import Callable

import msgpack
import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import CorruptBody
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map
from schemaless_store.values.codec import (
    FORMAT_JSON,
    FORMAT_MSGPACK,
    FORMAT_MSGPACK_ZLIB,
    MsgpackCodec,
)
from tests.support import STORE
from tests.support.admin import VIEW, client_for
from tests.support.hostile_input import LIST, found_ids, rows_by_entity, rows_of
from tests.support.raw import raw_set_body
from tests.support.reliability_report import recording

pytestmark = [STORE, pytest.mark.reliability]

MSGPACK = override_settings(
    SCHEMALESS={"BUCKETS": 4096, "CODEC": "schemaless_store.values.codec.MsgpackCodec"}
)


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda body: body[: len(body) // 2],
    "truncated compressed": lambda body: body[: len(body) // 2],
    "garbage": lambda body: b"\x00not a body",
    "empty": lambda body: b"",
    "unknown format byte": lambda body: b"\x7f" + body[1:],
    "bad zlib": lambda body: bytes([FORMAT_MSGPACK_ZLIB]) + b"nope",
    "a list, not a dict": lambda body: bytes([FORMAT_MSGPACK]) + msgpack.packb([1, 2]),
    "unknown extension": lambda body: (
        bytes([FORMAT_MSGPACK]) + msgpack.packb({"x": msgpack.ExtType(9, b"?")})
    ),
    "truncated JSON": lambda body: bytes([FORMAT_JSON]) + b'{"title": "cut',
    "unknown JSON tag": lambda body: bytes([FORMAT_JSON]) + b'{"x": {"$nope": 1}}',
}


def test_corrupt_bodies_are_named_shown_and_skipped(seeded):
    client = client_for(*VIEW)
    with recording("Corrupt or truncated bodies: read, admin, cleaner") as tally:
        for n, (kind, corrupt) in enumerate(CORRUPTIONS.items()):
            target = seeded[n % len(seeded)]
            if kind == "truncated compressed":
                target["blob"] = os.urandom(300).hex()  # compressible hex: a zlib body
                with MSGPACK:  # whatever the suite's codec (SCHEMALESS_TEST_CODEC)
                    target.save()
                assert bytes(Entity.objects.get(id=target.id).row_body)[0] == FORMAT_MSGPACK_ZLIB
            raw_set_body(target, corrupt(bytes(Entity.objects.get(id=target.id).row_body)))
            name = str(target.id)

            # Reading it: a CorruptBody naming the entity, from every read path.
            reads = {
                "get()": lambda t=target: Entity.objects.get(id=t.id).properties,
                "get_many()": lambda t=target: Entity.objects.get_many([t.id])[t.id]["title"],
                "a query": lambda t=target: list(Entity.objects.filter_index(link=t["link"])),
            }
            for path, read in reads.items():
                tally.refuses(CorruptBody, read, f"{kind}: {path}", match=name)
            # Other entities read as before.
            other = seeded[(n + 1) % len(seeded)]
            found = found_ids(link=other["link"])
            tally.expect(found == {other.id}, f"{kind}: {other['link']} finds {found}")

            # The admin's list (that shard) and detail page render and show the problem.
            listing = client.get(LIST, {"shard": target.shard})
            assert listing.status_code == 200
            text = listing.content.decode()
            assert f"entity {name}: " in text and "sls-bad" in text  # the error, as its preview
            detail = client.get(f"{LIST}{name}/change/")
            assert detail.status_code == 200
            page = detail.content.decode()
            assert 'class="errornote' in page and f"entity {name}: " in page

            # The cleaner reports and skips it, and still repairs the others.
            victim = seeded[(n + 2) % len(seeded)]
            conn = connections[
                bucket_map.alias_for(
                    registry.get("index_link").routing_key(
                        registry.get("index_link").column_value("link", victim["link"])
                    )
                )
            ]
            with conn.cursor() as cursor:  # a missing row the cleaner must put back
                cursor.execute("DELETE FROM index_link WHERE entity_id = %s", [victim.id.bytes])
            its_rows = rows_of(target.id.bytes)
            out, err = io.StringIO(), io.StringIO()
            call_command("runcleaner", "--once", "--nice=0", stdout=out, stderr=err)  # exits 0
            assert target.id.hex in err.getvalue() and "corrupt body" in err.getvalue()
            assert its_rows
            tally.expect(
                rows_of(target.id.bytes) == its_rows,
                f"{kind}: the cleaner changed the index rows of an entity it cannot read",
                "lost",
            )  # left alone: unknowable
            implied, stored = rows_by_entity(skip=target.id.bytes)
            tally.expect(
                implied == stored,
                f"{kind}: other entities' rows after the cleaner: missing {implied - stored}, "
                f"extra {stored - implied}",
            )

            properties = seeded[n].properties
            del properties["id"]
            raw_set_body(target, MsgpackCodec().encode(properties))
            tally.cases += 1

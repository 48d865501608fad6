"""Hostile and bad input (issue 8), **Unicode and sizes**: 4-byte characters in values and
indexed strings, 1 MB values, index values at and past their column's length, empty
strings, ``None``, nesting at and past ``codec.MAX_NESTING``.

Measured in ``tests.support.reliability_report.recording`` (its row is recorded, with what
it counted, before the test fails); docs/reliability.md lists the classes."""

from __future__ import annotations

import io
import os

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import (
    BodyTooLarge,
    IndexValueError,
    IndexValueTooLong,
    InvalidQuery,
    UnsupportedValue,
)
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from schemaless_store.values.codec import MAX_NESTING
from tests.support import STORE
from tests.support.admin import VIEW, client_for
from tests.support.hostile_input import (
    LIST,
    check_unchanged,
    found_ids,
    nested,
    rows_by_entity,
    snapshot,
    store_tables,
)
from tests.support.reliability_report import recording
from tests.support.values import same

pytestmark = [STORE, pytest.mark.reliability]


EMOJI = [
    "\N{GRINNING FACE}",
    "\N{GRINNING FACE WITH SMILING EYES}",
    "👩‍👩‍👧",
    "\U0001d11e",
    "é",
    "e\u0301",
]


def test_four_byte_characters_in_values_and_indexed_strings(backend):
    with recording("Unicode: 4-byte characters in values and indexed strings") as tally:
        made = {}
        for text in EMOJI:
            entity = Entity.objects.create(
                link=text, user_id=text, tags=[text, "x"], title=text * 3, **{text: text}
            )
            made[text] = entity.id
        for text, entity_id in made.items():
            back = Entity.objects.get(id=entity_id)
            tally.expect(
                back["title"] == text * 3 and back[text] == text,
                f"{text!r} read back as {back.properties!r}",
                "lost",
            )
            # Each finds its own entity only: no collation folds 😀 and 😁, or é and e+◌́.
            for prop in ("link", "user_id", "tags"):
                found = found_ids(**{prop: text})
                tally.expect(found == {entity_id}, f"{prop}={text!r} finds {found}")
            tally.cases += 4
        found = found_ids(tags="x")
        tally.expect(len(found) == len(EMOJI), f"tags='x' finds {len(found)} entities")
        by_code_point = [
            e["link"] for e in Entity.objects.filter_index(link__gte="").order_by("link")
        ]
        tally.expect(by_code_point == sorted(EMOJI), f"code-point order is {by_code_point}")
        tally.cases += 1
        if backend == "mariadb":
            for alias in shards.shard_aliases():
                with connections[alias].cursor() as cursor:
                    cursor.execute(
                        "SELECT @@character_set_client, @@character_set_connection, "
                        "@@character_set_results"
                    )
                    assert set(cursor.fetchone()) == {"utf8mb4"}
                    cursor.execute(
                        "SELECT table_name, table_collation FROM information_schema.tables "
                        "WHERE table_schema = DATABASE()"
                    )
                    collations = dict(cursor.fetchall())
                    for table in store_tables():
                        assert collations[table].startswith("utf8mb4"), (table, collations[table])
                    tally.cases += 1


def test_long_values_and_index_column_limits():
    fault = "Sizes: 1 MB values, index values at and past the column length, body limit"
    with recording(fault) as tally:
        big = os.urandom(512 * 1024).hex()  # 1 MiB of text that does not compress much
        entity = Entity.objects.create(text=big, emoji="\N{GRINNING FACE}" * 100_000, link="big")
        back = Entity.objects.get(id=entity.id)
        tally.expect(
            back["text"] == big and back["emoji"] == "\N{GRINNING FACE}" * 100_000,
            "the 1 MB values read back different",
            "lost",
        )
        tally.expect(found_ids(link="big") == {entity.id}, "link='big' does not find it")
        tally.cases += 1

        column = registry.get("index_link").columns["link"].max_bytes  # 255: tag byte + UTF-8
        fits, too_long = "a" * (column - 1), "a" * column
        emoji_fit = "\N{GRINNING FACE}" * ((column - 1) // 4)
        ok = [Entity.objects.create(link=value) for value in (fits, emoji_fit)]
        for value, made in zip((fits, emoji_fit), ok, strict=True):
            found = found_ids(link=value)
            tally.expect(found == {made.id}, f"a {len(value)}-character link finds {found}")
            tally.cases += 1
        middle = snapshot()
        refused = (too_long, emoji_fit + "\N{GRINNING FACE}", "x" * 1_000_000)
        for value in refused:
            what = f"a link of {len(value.encode())} bytes"
            tally.refuses(
                IndexValueTooLong,
                lambda value=value: Entity.objects.create(link=value),
                what,
                match=f"holds {column}",
            )
            tally.refuses(  # never truncated into a match
                InvalidQuery,
                lambda value=value: list(Entity.objects.filter_index(link=value)),
                f"a query for {what}",
            )
            middle = check_unchanged(tally, middle, f"{what}, refused")
            tally.cases += 1

        small = {"BUCKETS": 4096, "MAX_BODY_BYTES": 1000}
        with override_settings(SCHEMALESS=small):
            tally.refuses(
                BodyTooLarge,
                lambda: Entity.objects.create(text=os.urandom(1000).hex()),
                "a body over MAX_BODY_BYTES",
            )
        check_unchanged(tally, middle, "a body over MAX_BODY_BYTES")
        tally.cases += 1


def test_empty_strings_none_and_missing_properties():
    with recording("Empty strings, None and missing properties") as tally:
        empty = Entity.objects.create(**{"": "", "link": "", "user_id": "", "tags": [""]})
        back = Entity.objects.get(id=empty.id)
        tally.expect(back[""] == "" and back["link"] == "", f"read back {back.properties}", "lost")
        for probe in ({"link": ""}, {"tags": ""}):
            found = found_ids(**probe)
            tally.expect(found == {empty.id}, f"{probe!r} finds {found}")
        tally.cases += 1

        # A property that is missing is absent from the indexes on it (docs/design.md#data-model)...
        missing = Entity.objects.create(title="no link")
        rows = [row for row in rows_by_entity()[1] if row[3] == missing.id.bytes]
        tally.expect(rows == [], f"an entity without indexed properties has rows {rows}")
        tally.cases += 1
        # ... while None is a value: the default "key" column holds it (it sorts first,
        # docs/queries.md) and a query for None finds it; a typed column refuses it and nothing
        # is written.
        none = Entity.objects.create(link=None, tags=[None, "n"], title=None)
        link = Entity.objects.get(id=none.id)["link"]
        tally.expect(link is None, f"link None read back as {link!r}", "lost")
        for probe in ({"link": None}, {"tags": None}, {"link__lt": ""}):  # None sorts first
            found = found_ids(**probe)
            tally.expect(found == {none.id}, f"{probe!r} finds {found}")
        tally.cases += 1
        before = snapshot()
        tally.refuses(
            IndexValueError,
            lambda: Entity.objects.create(user_id=1, published=None),
            "None in an int column",
            match="int column",
        )
        check_unchanged(tally, before, "None in an int column")
        tally.cases += 1
        implied, stored = rows_by_entity()
        tally.expect(
            implied == stored,
            f"index rows differ: missing {implied - stored}, extra {stored - implied}",
        )


def test_nesting_at_and_past_the_limit():
    client = client_for(*VIEW)
    with recording(f"Nesting: {MAX_NESTING} levels stored, deeper refused") as tally:
        deepest = nested(MAX_NESTING)
        entity = Entity.objects.create(deep=deepest, link="deep")
        back = Entity.objects.get(id=entity.id)["deep"]
        tally.expect(same(back, deepest), f"{MAX_NESTING} levels read back different", "lost")
        tally.expect(found_ids(link="deep") == {entity.id}, "link='deep' does not find it")
        assert client.get(f"{LIST}{entity.id}/change/").status_code == 200  # the admin shows it
        assert (
            call_command(
                "runcleaner", "--once", "--nice=0", stdout=io.StringIO(), stderr=io.StringIO()
            )
            is None
        )
        tally.cases += 1
        before = snapshot()
        loop: list = []
        loop.append(loop)
        too_deep = (nested(MAX_NESTING + 1), {"wrapped": nested(MAX_NESTING)}, loop)
        for n, bad in enumerate(too_deep):
            tally.refuses(
                UnsupportedValue,
                lambda bad=bad: Entity.objects.create(deep=bad, link="too deep"),
                f"too deep value {n}",
                match="levels deep",
            )
            before = check_unchanged(tally, before, f"too deep value {n}")
            tally.cases += 1

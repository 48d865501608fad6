"""Hostile and bad input (issue 8), the codec's share:

- **Codec fuzz**: random property bags of every supported type go through the store
  (create, then replace) and read back equal; their indexed values find them, old values
  no longer do.
- **Unsupported values**, wherever they sit in a bag, raise ``UnsupportedValue`` and write
  nothing.

Measured in ``tests.support.reliability_report.recording`` (its row is recorded, with what
it counted, before the test fails); docs/reliability.md lists the classes."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import UnsupportedValue
from schemaless_store.models import Entity
from schemaless_store.values.codec import MAX_NESTING
from tests.support import STORE
from tests.support.hostile_input import check_unchanged, found_ids, nested, rows_by_entity, snapshot
from tests.support.reliability_report import recording
from tests.support.values import same

pytestmark = [STORE, pytest.mark.reliability]


FUZZ_EXAMPLES = int(os.environ.get("SCHEMALESS_RELIABILITY_FUZZ", "100"))


INDEXED = frozenset({"id"} | {p for index in registry.all() for p in index.properties})


timezones = (
    st.just(dt.UTC)
    | st.integers(-86_399, 86_399).map(lambda s: dt.timezone(dt.timedelta(seconds=s)))
    | st.timezones()
)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["\N{GRINNING FACE}", "\U0001d11e clef", "👩‍👩‍👧", "\x00nul", ""])
    | st.binary(max_size=12)
    | st.uuids()
    | st.datetimes(timezones=timezones)
    # The ends of datetime's range, where the UTC instant of a valid local time can overflow.
    | st.tuples(
        st.sampled_from([dt.datetime.min, dt.datetime.max]), st.integers(-86_399, 86_399)
    ).map(lambda t: t[0].replace(tzinfo=dt.timezone(dt.timedelta(seconds=t[1]))))
)


values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


names = st.text(max_size=10).filter(lambda n: n not in INDEXED)


key_values = (
    st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.text(max_size=16)
    | st.sampled_from(["\N{GRINNING FACE}", "\N{GRINNING FACE WITH SMILING EYES}", ""])
    | st.binary(max_size=16)
    | st.uuids()
)


indexed = st.fixed_dictionaries(
    {},
    optional={
        "user_id": key_values,
        "link": key_values,
        "tags": st.lists(st.text(max_size=8), max_size=3),
        "published": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    },
)


bags = st.tuples(st.dictionaries(names, values, max_size=5), indexed).map(
    lambda t: {**t[0], **t[1]}
)


def index_probes(bag: dict[str, Any]) -> list[dict[str, Any]]:
    """The queries that must find an entity with these properties."""
    probes = []
    if "user_id" in bag:
        probes.append({"user_id": bag["user_id"]})
        if "published" in bag:
            probes.append({"user_id": bag["user_id"], "published": bag["published"]})
    if "link" in bag:
        probes.append({"link": bag["link"]})
    probes.extend({"tags": tag} for tag in bag.get("tags", []))
    return probes


def test_fuzzed_property_bags_round_trip_through_the_store():
    with recording("Codec fuzz: random bags put, replaced, read and queried") as tally:

        def check(entity_id: uuid.UUID, bag: dict[str, Any], old: dict[str, Any] | None) -> None:
            back = Entity.objects.get(id=entity_id).properties
            del back["id"]
            tally.expect(same(back, bag), f"read back {back!r} for {bag!r}", "lost")
            for probe in index_probes(bag):
                tally.expect(entity_id in found_ids(**probe), f"{probe!r} does not find {bag!r}")
            for probe in index_probes(old or {}):
                if probe not in index_probes(bag):
                    tally.expect(
                        entity_id not in found_ids(**probe),
                        f"{probe!r} still finds the entity after it became {bag!r}",
                    )

        @settings(
            max_examples=FUZZ_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(first=bags, second=bags)
        def run(first: dict[str, Any], second: dict[str, Any]) -> None:
            entity = Entity.objects.create(**first)
            check(entity.id, first, None)
            Entity(id=entity.id, **second).save()  # replace the whole bag
            check(entity.id, second, first)
            tally.cases += 1

        run()
        implied, stored = rows_by_entity()
        tally.expect(
            implied == stored,
            f"index rows differ: missing {implied - stored}, extra {stored - implied}",
        )


class Opaque:
    pass


UNSUPPORTED: dict[str, Callable[[], Any]] = {
    "set": lambda: {1, 2},
    "frozenset": lambda: frozenset({"a"}),
    "tuple": lambda: (1, 2),
    "object": Opaque,
    "naive datetime": lambda: dt.datetime(2020, 1, 1),
    "date": lambda: dt.date(2020, 1, 1),
    "time": lambda: dt.time(12),
    "timedelta": lambda: dt.timedelta(1),
    "decimal": lambda: decimal.Decimal("1.5"),
    "complex": lambda: 1 + 2j,
    "int above 2**64-1": lambda: 2**64,
    "int below -2**63": lambda: -(2**63) - 1,
    "bytearray": lambda: bytearray(b"x"),
    "lone surrogate": lambda: "\ud800",
    "sub-second UTC offset": lambda: dt.datetime(
        2020, 1, 1, tzinfo=dt.timezone(dt.timedelta(microseconds=1))
    ),
    "list subclass": lambda: type("MyList", (list,), {})([1]),
    "nested past MAX_NESTING": lambda: nested(MAX_NESTING + 1),
}


def hide(value: Any, rng: random.Random) -> Any:
    """``value`` somewhere inside up to three levels of lists and dicts."""
    for _ in range(rng.randint(0, 3)):
        value = [1, value] if rng.random() < 0.5 else {"ok": 1, "bad": value}
    return value


def test_unsupported_values_raise_and_write_nothing(seeded):
    rng = random.Random(8)
    existing = seeded[0]
    with recording("Unsupported values: refused before any write") as tally:
        before = snapshot()
        for name, make in UNSUPPORTED.items():
            good = {
                "user_id": f"u-{name}",
                "link": f"https://example.com/{name}",
                "tags": [name],
                "published": 1,
                "username": f"name-{name}",
            }
            bad = {**good, "extra": hide(make(), rng)}
            writes = {
                "create": lambda bad=bad: Entity.objects.create(**bad),
                "save over an existing entity": lambda bad=bad: Entity(
                    id=existing.id, **bad
                ).save(),
                "bulk_put after a good item": lambda bad=bad: Entity.objects.bulk_put(
                    [{"user_id": "fine", "link": "fine", "username": "fine"}, bad]
                ),
            }
            for how, write in writes.items():
                tally.refuses(UnsupportedValue, write, f"{how} with a {name}")
                before = check_unchanged(tally, before, f"{how} with a {name}")
                tally.cases += 1
        back = Entity.objects.get(id=existing.id).properties
        tally.expect(same(back, existing.properties), f"{existing.id} became {back!r}", "lost")

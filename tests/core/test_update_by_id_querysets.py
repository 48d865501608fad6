"""``update()`` on a queryset of entities named by id updates what the queryset matches, as
Django's would, once it is combined: ``none()`` matches nothing, ``&``, ``|`` and ``^`` of two
querysets by id match the ids both, either or one of them name, and ``union()`` refuses as
Django refuses it (a hostile review of issue 45's item 5 found each updating the first
queryset's ids instead)."""

from __future__ import annotations

import pytest
from django.db import NotSupportedError
from django.db.models import Q

from schemaless_store.exceptions import BulkWriteNotSupported
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.buckets import ids_on

pytestmark = STORE


@pytest.fixture
def three() -> list[Entity]:
    alias = shards.shard_aliases()[0]
    return [Entity.objects.create(id=key, title="before") for key in ids_on(alias, 3)]


def titles(entities: list[Entity]) -> list[str]:
    return [Entity.objects.get(id=e.id)["title"] for e in entities]


def test_none_updates_nothing(three):
    a = three[0]
    assert Entity.objects.filter(id=a.id).none().update(title="after") == 0
    assert titles(three) == ["before"] * 3


@pytest.mark.parametrize(
    ("combine", "changed"),
    [
        (lambda x, y: x & y, [False, True, False]),
        (lambda x, y: x | y, [True, True, True]),
        (lambda x, y: x ^ y, [True, False, True]),
    ],
    ids=["and", "or", "xor"],
)
def test_combined_querysets_by_id_update_what_they_match(three, combine, changed):
    a, b, c = (e.id for e in three)
    left = Entity.objects.filter(id__in=[a, b])
    right = Entity.objects.filter(id__in=[b, c])
    combined = combine(left, right)
    alias = three[0].shard
    matched = {e.id for e in combined.using(alias)}
    assert matched == {e.id for e, hit in zip(three, changed, strict=True) if hit}
    assert combined.update(title="after") == sum(changed)
    assert titles(three) == ["after" if hit else "before" for hit in changed]


def test_a_combination_with_another_filter_refuses(three):
    a, b = three[0].id, three[1].id
    with pytest.raises(BulkWriteNotSupported):
        (Entity.objects.filter(id=a) | Entity.objects.filter(added_id__gt=0)).update(title="x")
    with pytest.raises(BulkWriteNotSupported):
        (Entity.objects.filter(id=a) & Entity.objects.filter(id=b).filter(added_id__gt=0)).update(
            title="x"
        )
    assert titles(three) == ["before"] * 3


def test_a_sliced_side_or_another_condition_refuses(three):
    """Django puts a subquery in a sliced side's place, and ``complex_filter()`` or ``extra()``
    add a condition without ``filter()``: the ids no longer say what matches."""
    a, b, c = (e.id for e in three)
    by_id = Entity.objects.filter(id__in=[a])
    sliced = Entity.objects.filter(id__in=[b, c]).order_by("row_id")[:1]
    for queryset in (
        by_id | sliced,
        by_id ^ sliced,
        by_id.complex_filter(Q(added_id=-1)),
        by_id.extra(where=["1 = 0"]),
    ):
        with pytest.raises(BulkWriteNotSupported):
            queryset.update(title="x")
    assert titles(three) == ["before"] * 3


def test_union_refuses_as_django_does(three):
    a, b = three[0].id, three[1].id
    with pytest.raises(NotSupportedError):
        Entity.objects.filter(id=a).union(Entity.objects.filter(id=b)).update(title="x")
    assert titles(three) == ["before"] * 3

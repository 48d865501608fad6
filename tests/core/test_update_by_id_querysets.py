"""``update()`` on a queryset of entities named by id updates what the queryset matches, as
Django's would, once it is combined: ``none()`` matches nothing, ``&``, ``|`` and ``^`` of two
querysets by id match the ids both, either or one of them name, and ``union()`` refuses as
Django refuses it (a hostile review of issue 45's item 5 found each updating the first
queryset's ids instead). A ``using(alias)`` queryset updates only what is stored there, and a
sliced left side of ``|``, ``&`` or ``^`` stays the store's queryset on its shard."""

from __future__ import annotations

import pytest
from django.db import NotSupportedError, connections
from django.db.models import Q
from django.db.models.functions import Length

from schemaless_store.exceptions import BulkWriteNotSupported, ConfigurationError, InvalidQuery
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.buckets import ids_on
from tests.support.raw import index_rows

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


def test_a_queryset_of_another_shard_updates_nothing_there(three):
    """``using(other).filter(id=a)`` matches nothing when ``a`` is stored elsewhere, as its
    read says; its ``update()`` changed ``a`` where it lives and counted 1."""
    home, other = shards.shard_aliases()[:2]
    a = three[0].id
    assert list(Entity.objects.using(other).filter(id=a)) == []
    assert Entity.objects.using(other).filter(id=a).update(title="elsewhere") == 0
    assert Entity.objects.using(other).filter(id__in=[e.id for e in three]).update(title="x") == 0
    assert titles(three) == ["before"] * 3
    assert Entity.objects.using(home).filter(id=a).update(title="home") == 1
    assert titles(three) == ["home", "before", "before"]


def test_a_sliced_left_side_stays_the_stores_queryset_on_its_shard(three):
    """Django puts a sliced left side's place in the model's base manager: a plain queryset
    on no shard, whose reading failed (its subquery on another database) and whose
    ``delete()`` and ``update()`` were Django's own, past the index rows. It is the store's
    queryset on the same shard: its ``update()`` refuses, and its ``delete()`` takes each
    entity's index rows with it. (MariaDB refuses the subquery's ``LIMIT``, as it does under
    Django's own querysets: nothing is deleted there.)"""
    alias = shards.shard_aliases()[0]
    for entity in three:
        entity["user_id"] = f"u-{entity.id.hex}"
        entity.save()
    first = Entity.objects.using(alias).order_by("row_id")[:1]
    first_id = Entity.objects.using(alias).order_by("row_id")[0].id
    other = next(entity.id for entity in three if entity.id != first_id)
    by_id = Entity.objects.using(alias).filter(id=other)
    for combined in (first | by_id, first ^ by_id):  # (& refuses a sliced side, as Django's)
        assert type(combined) is type(first) and combined.db == alias
        with pytest.raises(BulkWriteNotSupported):
            combined.update(title="x")
    combined = first | by_id
    if connections[alias].vendor == "mysql":
        with pytest.raises(NotSupportedError, match="LIMIT & IN"):
            combined.delete()
        assert len(index_rows("index_user_id")) == 3
        return
    assert {entity.id for entity in first ^ by_id} == {first_id, other}
    assert {entity.id for entity in combined} == {first_id, other}
    assert combined.delete()[0] == 2
    kept = {e.id.bytes for e in three if e.id not in (first_id, other)}
    assert {row[1] for row in index_rows("index_user_id")} == kept


def test_a_sliced_values_side_reads_as_djangos_would(three):
    """A review found the rebuilt queryset keeping the left side's ``values()`` reading
    with a query that selects nothing (``[{}, {}]``); it reads as Django's own does."""
    alias = shards.shard_aliases()[0]
    if connections[alias].vendor == "mysql":
        pytest.skip("MariaDB refuses the subquery's LIMIT (error 1235), as under Django's")
    left = Entity.objects.using(alias).order_by("row_id").values("row_id")[:1]
    right = Entity.objects.using(alias).filter(id=three[2].id).values("row_id")
    first = Entity.objects.using(alias).order_by("row_id")[0].id
    found = {row["row_id"] for row in left | right}
    assert found == {first.bytes, three[2].id.bytes}


def test_update_on_a_queryset_of_no_shard_refuses(three):
    """``filter(id=a).using("default")``: reading it is refused (no entity lives there), and
    so is its ``update()``, rather than counting 0."""
    with pytest.raises(ConfigurationError, match="not a shard alias"):
        Entity.objects.filter(id=three[0].id).using("default").update(title="x")
    assert titles(three) == ["before"] * 3


def test_a_sliced_annotated_side_refuses_with_what_to_do(three):
    """Django's subquery form of a sliced side keeps none of its annotations: refused (a
    review found ``values("row_id").annotate(n=...)`` silently losing ``n``)."""
    alias = shards.shard_aliases()[0]
    annotated = Entity.objects.using(alias).annotate(n=Length("row_id")).order_by("row_id")[:1]
    with pytest.raises(InvalidQuery, match="evaluate it first"):
        annotated | Entity.objects.using(alias).filter(id=three[2].id)

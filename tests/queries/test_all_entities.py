"""``Entity.objects.all()`` behaves like a Django queryset where users expect it: slicing,
``first()``, ``count()``, ``exists()``, ``len()``/``bool()``, chunked iteration, and Django's
errors for bad input. Its order: shard after shard (SCHEMALESS["SHARDS"] order), ``added_id``
within a shard."""

from __future__ import annotations

import pytest

from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.factories import NumberedFactory
from tests.support.raw import record_reads

pytestmark = STORE


@pytest.fixture
def made():
    """25 entities on both shards, in the documented order of all()."""
    entities = NumberedFactory.create_batch(25)
    assert len({e.shard for e in entities}) == len(shards.shard_aliases())
    order = {alias: n for n, alias in enumerate(shards.shard_aliases())}
    stored = {e.id: e for alias in order for e in Entity.objects.using(alias).all()}
    return sorted(stored.values(), key=lambda e: (order[e.shard], e.added_id))


def ids(entities) -> list:
    return [e.id for e in entities]


def test_an_empty_store():
    everything = Entity.objects.all()
    assert len(everything) == 0 and not everything
    assert everything.count() == 0 and not everything.exists()
    assert everything.first() is None
    assert list(Entity.objects.all()[:10]) == []
    with pytest.raises(IndexError):
        Entity.objects.all()[0]


def test_order_count_len_and_bool(made):
    everything = Entity.objects.all()
    assert everything.count() == 25
    assert ids(everything) == ids(made)
    assert len(everything) == 25 and bool(everything)
    assert everything.first().id == made[0].id and everything.exists()


@pytest.mark.parametrize(
    ("start", "stop"), [(None, 5), (3, 9), (10, None), (0, 2000), (24, 30), (30, 40), (7, 7)]
)
def test_slices_are_lazy_querysets_of_the_same_order(made, start, stop):
    sliced = Entity.objects.all()[start:stop]
    assert ids(sliced) == ids(made[start:stop])
    assert Entity.objects.all()[start:stop].count() == len(made[start:stop])
    assert Entity.objects.all()[start:stop].exists() == bool(made[start:stop])


def test_slices_of_slices_indexes_and_steps(made):
    everything = Entity.objects.all()
    assert ids(everything[5:20][2:6]) == ids(made[5:20][2:6])
    assert ids(everything[5:20][10:]) == ids(made[5:20][10:])
    assert everything[13].id == made[13].id
    assert everything[5:20][3].id == made[8].id
    assert ids(everything[1:12:3]) == ids(made[1:12:3])  # a step evaluates, as in Django
    with pytest.raises(IndexError):
        everything[25]
    with pytest.raises(IndexError):
        everything[5:8][3]


def test_the_issue_example_reads_no_more_than_it_needs(made, monkeypatch):
    reads = record_reads(monkeypatch, "entities")
    first_two = list(Entity.objects.all()[:2])
    assert ids(first_two) == ids(made[:2])
    assert len(reads) == 1 and reads[0].rows == 2  # one shard, LIMIT 2
    reads.clear()
    assert len(list(Entity.objects.all()[:2000])) == 25


def test_bad_input_raises_as_django_does(made):
    everything = Entity.objects.all()
    with pytest.raises(ValueError, match="Negative indexing is not supported"):
        everything[-1]
    with pytest.raises(ValueError, match="Negative indexing is not supported"):
        everything[-3:]
    with pytest.raises(ValueError, match="Negative indexing is not supported"):
        everything[:-1]
    with pytest.raises(TypeError, match="must be integers or slices"):
        everything["a"]
    with pytest.raises(ValueError, match="Chunk size must be strictly positive"):
        list(everything.iterator(chunk_size=0))


def test_evaluated_once_then_cached(made, monkeypatch):
    everything = Entity.objects.all()
    assert len(everything) == 25
    reads = record_reads(monkeypatch)
    assert everything.count() == 25 and everything.exists() and bool(everything)
    assert everything[3].id == made[3].id and ids(everything[2:4]) == ids(made[2:4])
    assert reads == []


@pytest.mark.parametrize("chunk_size", [1, 4, 25, 500])
def test_chunked_iteration_walks_by_keyset_without_caching(made, monkeypatch, chunk_size):
    reads = record_reads(monkeypatch, "entities")
    everything = Entity.objects.all()
    assert ids(everything.iterator(chunk_size=chunk_size)) == ids(made)
    on_shard = {a: sum(e.shard == a for e in made) for a in shards.shard_aliases()}
    # Each shard: its entities in chunks, plus one read that finds the chunk short.
    assert len(reads) == sum(n // chunk_size + 1 for n in on_shard.values())
    reads.clear()
    assert everything.count() == 25 and reads  # not cached: count() read again

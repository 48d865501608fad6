from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemaless_store.exceptions import IndexValueError, IndexValueTooLong, InvalidEntityId
from schemaless_store.values import bucket_hash, entity_ids, index_values

U = uuid.UUID("0123456789abcdef0123456789abcdef")


@pytest.mark.parametrize("form", [U, U.bytes, U.hex, str(U), U.hex.upper(), bytearray(U.bytes)])
def test_entity_id_forms(form):
    assert entity_ids.entity_id_bytes(form) == U.bytes


@pytest.mark.parametrize("bad", [b"short", b"x" * 17, "not-hex", "0" * 31, 123, None, 1.5, ["a"]])
def test_bad_entity_ids_raise(bad):
    with pytest.raises(InvalidEntityId):
        entity_ids.entity_id_bytes(bad)


def test_bucket_is_pinned_across_releases():
    # blake2b of the canonical bytes: if this changes, every stored row is on the wrong shard.
    assert bucket_hash.stable_hash(b"user-1") == int.from_bytes(
        __import__("hashlib").blake2b(b"user-1", digest_size=8).digest(), "big"
    )
    assert bucket_hash.bucket_of(U.bytes, 4096) == bucket_hash.stable_hash(U.bytes) % 4096


def test_buckets_of_many_keys_are_each_keys_bucket():
    many = [uuid.uuid4().bytes for _ in range(200)] + [b"", b"user-1", index_values.encode_key("x")]
    for count in (1, 7, 4096):
        assert bucket_hash.buckets_of(many, count) == [
            bucket_hash.bucket_of(k, count) for k in many
        ]
    assert bucket_hash.buckets_of([], 4096) == []


def test_bucket_is_the_same_in_another_process_with_another_hash_seed():
    code = (
        "from schemaless_store.values.bucket_hash import bucket_of; "
        "from schemaless_store.values.index_values import encode_key; "
        "print(bucket_of(b'user-1', 4096), bucket_of(encode_key('x'), 4096))"
    )
    outputs = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outputs.add(subprocess.check_output([sys.executable, "-c", code], env=env, text=True))
    assert len(outputs) == 1
    x_bucket = bucket_hash.bucket_of(index_values.encode_key("x"), 4096)
    here = f"{bucket_hash.bucket_of(b'user-1', 4096)} {x_bucket}\n"
    assert outputs == {here}


def key_order_matches(a, b) -> None:
    ka, kb = index_values.encode_key(a), index_values.encode_key(b)
    assert (ka < kb) == (a < b)
    assert (ka == kb) == (a == b)


@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1))
def test_int_keys_sort_like_ints(a, b):
    key_order_matches(a, b)


@given(
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False)),
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False)),
)
def test_numbers_sort_together_like_python(a, b):
    key_order_matches(a, b)


@given(st.text(), st.text())
def test_strings_sort_by_code_point(a, b):
    key_order_matches(a, b)


@given(st.binary(), st.binary())
def test_bytes_sort_bytewise(a, b):
    key_order_matches(a, b)


@given(st.datetimes(timezones=st.just(dt.UTC)), st.datetimes(timezones=st.just(dt.UTC)))
def test_datetimes_sort_in_time(a, b):
    key_order_matches(a, b)


def test_equal_numbers_share_a_key():
    assert index_values.encode_key(1) == index_values.encode_key(1.0)
    assert index_values.encode_key(0.0) == index_values.encode_key(-0.0)
    assert index_values.encode_key(True) != index_values.encode_key(1)


@pytest.mark.parametrize(
    "bad", [float("nan"), 2**63, [1], {"a": 1}, dt.datetime(2020, 1, 1), object()]
)
def test_unindexable_values(bad):
    with pytest.raises(IndexValueError):
        index_values.encode_key(bad)


def test_column_types():
    assert index_values.IntColumn().to_db(5) == 5
    with pytest.raises(IndexValueError):
        index_values.IntColumn().to_db("5")
    with pytest.raises(IndexValueError):
        index_values.IntColumn().to_db(True)
    with pytest.raises(IndexValueTooLong):
        index_values.StrColumn(max_bytes=4).to_db("hello")
    with pytest.raises(IndexValueTooLong):
        index_values.KeyColumn().to_db("x" * 300)
    assert index_values.StrColumn().to_db("é") == "é".encode()


def test_a_datetime_key_whose_utc_instant_is_out_of_range_decodes_to_value_error():
    """``decode_key`` promises ValueError for what it cannot show (the admin relies on it)."""
    value = dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))  # UTC: year 0
    with pytest.raises(ValueError, match="outside datetime's range"):
        index_values.decode_key(index_values.encode_key(value))


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_float_column_refuses_what_mysql_double_cannot_hold(value):
    with pytest.raises(IndexValueError):
        index_values.FloatColumn().to_db(value)

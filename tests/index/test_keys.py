"""Key fingerprints: equal keys hash equal however they arrive, different keys differ."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicator.index.keys import fingerprint, key_type_names


def fp(*cols: pa.Array) -> list[tuple[int, int]]:
    hi, lo = fingerprint(list(cols))
    return list(zip(hi.tolist(), lo.tolist(), strict=True))


def test_integer_widths_and_chunking_agree() -> None:
    values = [1, -5, 2**31 - 1, 0]
    base = fp(pa.array(values, pa.int64()))
    assert fp(pa.array(values, pa.int32())) == base
    chunked = pa.chunked_array([pa.array(values[:2], pa.int64()), pa.array(values[2:], pa.int64())])
    assert fp(chunked) == base  # type: ignore[arg-type]
    assert fp(pa.array(values, pa.int64()).slice(1)) == base[1:]


def test_single_integer_key_is_exact() -> None:
    hi, _lo = fingerprint([pa.array(np.arange(-500_000, 500_000, dtype=np.int64))])
    assert len(np.unique(hi)) == 1_000_000


def test_string_types_agree_and_slices_hash_their_own_values() -> None:
    values = ["a", "", "ßü", "a" * 1000]
    base = fp(pa.array(values, pa.string()))
    assert fp(pa.array(values, pa.large_string())) == base
    assert fp(pa.array(values, pa.string()).slice(2)) == base[2:]
    assert len(set(base)) == 4


def test_timestamps_dates_decimals_uuids() -> None:
    t = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.UTC)
    assert fp(pa.array([t], pa.timestamp("ms", "UTC"))) == fp(pa.array([t], pa.timestamp("us", "UTC")))
    d = dt.date(2020, 2, 29)
    assert fp(pa.array([d], pa.date32())) == fp(pa.array([d], pa.date64()))
    dec = [decimal.Decimal("1.50"), decimal.Decimal("-2.00")]
    assert fp(pa.array(dec, pa.decimal128(10, 2))) == fp(pa.array(dec, pa.decimal128(20, 2)))
    assert len(set(fp(pa.array(dec, pa.decimal128(10, 2))))) == 2
    u = [uuid.uuid4().bytes, uuid.uuid4().bytes]
    assert len(set(fp(pa.array(u, pa.binary(16))))) == 2


def test_composite_key_order_matters() -> None:
    a, b = pa.array([1, 2], pa.int64()), pa.array([2, 1], pa.int64())
    assert fp(a, b)[0] != fp(b, a)[0]
    assert fp(a, b)[0] != fp(a)[0]
    assert key_type_names([a, pa.array(["x", "y"])]) == ("int64", "large_binary")


def test_nulls_and_floats_are_refused() -> None:
    with pytest.raises(ValueError, match="null"):
        fingerprint([pa.array([1, None])])
    with pytest.raises(TypeError, match="cannot be indexed"):
        fingerprint([pa.array([1.5])])


@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.binary(max_size=12)), min_size=1, max_size=60))
def test_distinct_composite_keys_have_distinct_fingerprints(rows: list[tuple[int, bytes]]) -> None:
    ints = pa.array([r[0] for r in rows], pa.int64())
    blobs = pa.array([r[1] for r in rows], pa.binary())
    assert len(set(fp(ints, blobs))) == len(set(rows))

"""Native histogram bucket math against the spec: bucket i covers (base^(i−1), base^i]."""

from __future__ import annotations

import bisect
import math
import struct
import sys
from decimal import Decimal, localcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.exposition.nativehist import (
    BOUNDS,
    DEFAULT_ZERO_THRESHOLD,
    MAX_SCHEMA,
    MAX_WIDTH_FACTOR,
    MIN_SCHEMA,
    NativeBuckets,
    bucket_index,
    spans_and_deltas,
)
from tests.protodecode import expand_spans

# client_golang's nativeHistogramBounds (prometheus/histogram.go) for a few schemas: the
# reference implementation builds its table by repeated multiplication, so a few entries are
# an ulp or three below the correctly rounded value that BOUNDS holds.
GO_BOUNDS = {
    1: (0.5, 0.7071067811865475),
    2: (0.5, 0.5946035575013605, 0.7071067811865475, 0.8408964152537144),
    3: (0.5, 0.5452538663326288, 0.5946035575013605, 0.6484197773255048,
        0.7071067811865475, 0.7711054127039704, 0.8408964152537144, 0.9170040432046711),
}
GO_SCHEMA_8_TAIL = (0.9892280131939752, 0.9919100824251095, 0.9945994234836328,
                    0.9972960560854698)


def exact_index(value: float, schema: int) -> int | None:
    """The spec's index, ceil(log2(v)·2^schema), at 40 digits; None right on a boundary."""
    with localcontext() as ctx:
        ctx.prec = 40
        scaled = Decimal(value).ln() / Decimal(2).ln() * Decimal(2) ** schema
        nearest = scaled.to_integral_value()
        if abs(scaled - nearest) < Decimal("1e-25"):
            return None
        return int(scaled.to_integral_value(rounding="ROUND_CEILING"))


def _bits(x: float) -> int:
    """A positive double's bits as an int: neighbours differ by 1 (one ulp)."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def test_bounds_are_the_correctly_rounded_spec_values():
    with localcontext() as ctx:
        ctx.prec = 40
        for schema in range(MAX_SCHEMA + 1):
            n = 2**schema
            assert len(BOUNDS[schema]) == n
            expected = [float(Decimal(2) ** (Decimal(j) / n) / 2) for j in range(n)]
            assert list(BOUNDS[schema]) == expected, schema


@pytest.mark.parametrize("schema", sorted(GO_BOUNDS))
def test_bounds_match_client_golang_within_an_ulp(schema):
    for ours, go in zip(BOUNDS[schema], GO_BOUNDS[schema], strict=True):
        assert abs(_bits(ours) - _bits(go)) <= 1


def test_schema_8_tail_matches_client_golang_within_three_ulps():
    for ours, go in zip(BOUNDS[8][-4:], GO_SCHEMA_8_TAIL, strict=True):
        assert 0 < _bits(ours) - _bits(go) <= 3


@pytest.mark.parametrize("schema", sorted(GO_BOUNDS))
def test_index_agrees_with_client_golang_off_the_bounds(schema):
    """client_golang's key: bisect of frexp's fraction into its table, plus (exp − 1)·2^s."""
    go = GO_BOUNDS[schema]
    for value in (0.001, 0.013, 0.1, 0.42, 0.7, 1.0, 1.3, 2.0, 3.0, 7.9, 42.0, 1e6):
        frac, exp = math.frexp(value)
        assert bucket_index(value, schema) == bisect.bisect_left(go, frac) + (exp - 1) * len(go)


# (value, schema, index) worked out by hand from the definition.
INDEX_TABLE = [
    (1.0, 0, 0), (2.0, 0, 1), (1.5, 0, 1), (0.5, 0, -1), (0.75, 0, 0), (3.0, 0, 2),
    (4.0, 0, 2), (4.000001, 0, 3),
    (1.0, 3, 0), (2.0, 3, 8), (3.0, 3, 13), (0.5, 3, -8), (1.05, 3, 1), (1.09, 3, 1),
    (1.1, 3, 2), (0.3, 3, -13),
    (1.0, 5, 0), (1.02, 5, 1), (1.022, 5, 2), (0.999, 5, 0), (0.97, 5, -1),
    (1.0, 8, 0), (1.0027, 8, 1), (1.0028, 8, 2),
    (1.0, -1, 0), (2.0, -1, 1), (4.0, -1, 1), (5.0, -1, 2), (0.25, -1, -1), (0.3, -1, 0),
    (1.0, -4, 0), (2.0, -4, 1), (65536.0, -4, 1), (65537.0, -4, 2), (1e-5, -4, -1),
    (2.0**-32, -4, -2), (2.0**-128, 3, -1024),
    (sys.float_info.max, 0, 1024), (sys.float_info.max, 3, 8192),
    (math.inf, 0, 1025), (math.inf, 3, 8193),
]


@pytest.mark.parametrize(("value", "schema", "index"), INDEX_TABLE)
def test_index_table(value, schema, index):
    assert bucket_index(value, schema) == index
    if value not in (math.inf, sys.float_info.max):
        assert exact_index(value, schema) in (index, None)


@settings(max_examples=400, deadline=None)
@given(st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False),
       st.integers(min_value=MIN_SCHEMA, max_value=MAX_SCHEMA))
def test_index_matches_the_definition(value, schema):
    expected = exact_index(value, schema)
    if expected is not None:
        assert bucket_index(value, schema) == expected


@pytest.mark.parametrize("schema", range(MIN_SCHEMA, MAX_SCHEMA + 1))
def test_powers_of_two_close_their_bucket(schema):
    """An exact power of two is the upper bound of a bucket: it belongs to that bucket."""
    for k in range(-20, 21):
        expected = k * 2**schema if schema >= 0 else -(-k // 2**-schema)
        assert bucket_index(2.0**k, schema) == expected


def test_zero_bucket_tiny_nan_and_inf():
    buckets = NativeBuckets(schema=3, max_buckets=0)
    for value in (0.0, -0.0, 5e-324, DEFAULT_ZERO_THRESHOLD, -DEFAULT_ZERO_THRESHOLD):
        buckets.observe(value)
    assert buckets.zero_count == 5 and not buckets.positive and not buckets.negative
    buckets.observe(math.nan)
    assert buckets.zero_count == 5 and buckets.bucket_count() == 0
    buckets.observe(2.0**-127)
    assert buckets.positive == {-1016: 1}
    buckets.observe(math.inf)
    buckets.observe(-math.inf)
    buckets.observe(-1.0)
    assert buckets.positive == {-1016: 1, 8193: 1}
    assert buckets.negative == {8193: 1, 0: 1}
    assert buckets.schema == 3 and buckets.bucket_count() == 4


def test_zero_threshold_zero_counts_only_zero():
    buckets = NativeBuckets(schema=0, zero_threshold=0.0)
    buckets.observe(0.0)
    buckets.observe(5e-324)
    assert buckets.zero_count == 1 and buckets.positive == {-1074: 1}


@pytest.mark.parametrize("kwargs", [{"schema": 9}, {"schema": -5}, {"max_buckets": -1},
                                    {"zero_threshold": -1.0}, {"zero_threshold": math.nan}])
def test_invalid_settings_raise(kwargs):
    with pytest.raises(ValueError):
        NativeBuckets(**kwargs)


def test_limit_halves_the_resolution_until_the_buckets_fit():
    buckets = NativeBuckets(schema=3, max_buckets=4)
    for value in (1.0, 2.0, 4.0, 8.0):
        buckets.observe(value)
    assert buckets.schema == 3 and buckets.positive == {0: 1, 8: 1, 16: 1, 24: 1}
    buckets.observe(16.0)
    # Schema 2, 1 and 0 still need 5 buckets; schema −1's buckets (4^(i−1), 4^i] need 3.
    assert buckets.schema == -1
    assert buckets.positive == {0: 1, 1: 2, 2: 2}


def test_limit_stops_at_the_lowest_schema():
    buckets = NativeBuckets(schema=-3, max_buckets=1)
    buckets.observe(1.0)
    buckets.observe(1e300)
    assert buckets.schema == MIN_SCHEMA and buckets.bucket_count() == 2


def test_no_limit():
    buckets = NativeBuckets(schema=8, max_buckets=0)
    for k in range(1000):
        buckets.observe(1.0 + k / 100)
    assert buckets.schema == 8 and buckets.bucket_count() > 160


def test_a_far_away_value_halves_the_resolution_instead_of_costing_megabytes():
    """Two populated buckets 200 powers of two apart: within the bucket limit, but the dense
    range is bounded too (MAX_WIDTH_FACTOR × the limit)."""
    buckets = NativeBuckets(schema=8, max_buckets=160)
    buckets.observe(1e-30)
    buckets.observe(1e30)
    limit, schema = 160 * MAX_WIDTH_FACTOR, buckets.schema
    assert len(buckets.positive_counts) <= limit
    assert bucket_index(1e30, schema + 1) - bucket_index(1e-30, schema + 1) + 1 > limit
    assert buckets.positive == {bucket_index(1e-30, buckets.schema): 1,
                                bucket_index(1e30, buckets.schema): 1}


def test_dense_counts_grow_both_ways_and_keep_their_ends_populated():
    buckets = NativeBuckets(schema=0, max_buckets=0)
    for value in (4.0, 1.0, 64.0, 4.0):
        buckets.observe(value)
    assert list(buckets.positive_counts) == [1, 0, 2, 0, 0, 0, 1]
    assert buckets.positive_offset == 0 and buckets.positive == {0: 1, 2: 2, 6: 1}
    copy = buckets.snapshot()
    buckets.observe(0.25)
    assert copy.positive == {0: 1, 2: 2, 6: 1} and buckets.positive_offset == -2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), max_size=200),
       st.integers(min_value=MIN_SCHEMA, max_value=MAX_SCHEMA), st.integers(1, 40))
def test_reduced_histogram_equals_one_observed_at_the_final_schema(values, schema, limit):
    limited = NativeBuckets(schema=schema, max_buckets=limit)
    for value in values:
        limited.observe(value)
    direct = NativeBuckets(schema=limited.schema, max_buckets=0)
    for value in values:
        direct.observe(value)
    assert (limited.positive, limited.negative, limited.zero_count) == (
        direct.positive, direct.negative, direct.zero_count)
    assert limited.bucket_count() <= limit or limited.schema == MIN_SCHEMA


# buckets → (spans, deltas); gaps of 1–2 empty buckets are filled rather than a new span.
SPAN_TABLE = [
    ({}, [], []),
    ({0: 1}, [(0, 1)], [1]),
    ({-3: 2, -2: 1}, [(-3, 2)], [2, -1]),
    ({5: 3, 6: 3, 7: 1}, [(5, 3)], [3, 0, -2]),
    ({0: 1, 2: 3}, [(0, 3)], [1, -1, 3]),
    ({0: 1, 3: 1}, [(0, 4)], [1, -1, 0, 1]),
    ({0: 1, 4: 2}, [(0, 1), (3, 1)], [1, 1]),
    ({-10: 4, 10: 4, 11: 1}, [(-10, 1), (19, 2)], [4, 0, -3]),
]


def dense(buckets: dict[int, int]) -> tuple[list[int], int]:
    """{index: count} as dense counts and the index of the first."""
    if not buckets:
        return [], 0
    low = min(buckets)
    return [buckets.get(i, 0) for i in range(low, max(buckets) + 1)], low


@pytest.mark.parametrize(("buckets", "spans", "deltas"), SPAN_TABLE)
def test_spans_and_deltas_table(buckets, spans, deltas):
    assert spans_and_deltas(*dense(buckets)) == (spans, deltas)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(-2000, 2000), st.integers(1, 10**12), max_size=60))
def test_spans_and_deltas_decode_to_the_buckets(buckets):
    assert expand_spans(*spans_and_deltas(*dense(buckets))) == buckets


def test_spans_skip_empty_ends():
    assert spans_and_deltas([0, 0, 3, 0, 0, 0, 1, 0], 10) == ([(12, 1), (3, 1)], [3, -2])
    assert spans_and_deltas([0, 0], 5) == ([], [])


def test_a_count_past_32_bits_widens_its_array():
    buckets = NativeBuckets(schema=0, max_buckets=0)
    buckets.observe(1.0)
    buckets.observe(4.0)
    assert buckets.positive_counts.itemsize == 4  # type: ignore[attr-defined]
    buckets.positive_counts[0] = 2**32 - 1  # type: ignore[index]
    buckets.observe(1.0)
    assert buckets.positive == {0: 2**32, 2: 1}
    assert buckets.positive_counts.itemsize == 8  # type: ignore[attr-defined]
    buckets.observe(0.125)  # widening keeps 8-byte counts
    assert buckets.positive == {-3: 1, 0: 2**32, 2: 1}


def test_merging_two_big_buckets_widens_the_counts():
    buckets = NativeBuckets(schema=0, max_buckets=2)
    buckets.observe(1.0)  # bucket 0: (0.5, 1]
    buckets.observe(2.0)  # bucket 1: (1, 2]
    buckets.positive_counts[0] = buckets.positive_counts[1] = 2**32 - 1  # type: ignore[index]
    buckets.observe(4.0)  # bucket 2: three populated, so schema −1, where 2 and 4 share (1, 4]
    assert buckets.schema == -1 and buckets.positive == {0: 2**32 - 1, 1: 2**32}
    assert buckets.positive_counts.itemsize == 8  # type: ignore[attr-defined]

"""Native (exponential) histogram buckets: Prometheus' bucket math, sparse counts, a bucket limit.

At schema s (−4…8) every power of two is split into 2^s buckets: bucket i covers
(base^(i−1), base^i] with base = 2^(2^−s), so bucket 0 ends at 1 and every bucket is the same
relative width (schema 3: 9 %, schema 5: 2.2 %). Values with |v| ≤ the zero threshold are
counted in the zero bucket. The index is found as client_golang finds it, without a logarithm:
`math.frexp` splits v into frac·2^exp with frac in [0.5, 1), and a table of where each of the
2^s buckets starts inside [0.5, 1) gives the position (a binary search over ≤ 256 floats).

Counts are sparse (only populated buckets exist). When more buckets are populated than the limit,
the resolution is halved (schema − 1, buckets merged pairwise) until they fit, as client_golang's
`NativeHistogramMaxBucketNumber` does; resolution is never raised again. The sample count and sum
belong to the caller, who shares them with the classic buckets of the same histogram.
"""

from __future__ import annotations

import math
import sys
from bisect import bisect_left
from itertools import pairwise

MIN_SCHEMA = -4
MAX_SCHEMA = 8
# client_golang's default: 2^-128 is a bucket boundary at every schema, and a zero bucket wider
# than 0 makes even an empty histogram unambiguously native for every Prometheus version.
DEFAULT_ZERO_THRESHOLD = 2.0**-128


# Per schema 0…8: where each of the 2^s buckets starts inside [0.5, 1), i.e. 0.5·2^(j/2^s).
# `**` is correctly rounded here (tests check every bound against a 40-digit reference);
# client_golang's table is built by repeated multiplication and is up to 3 ulps lower in places,
# which only matters for a value lying exactly on a bound.
BOUNDS: tuple[tuple[float, ...], ...] = tuple(
    tuple(2.0 ** (j / 2**schema) / 2 for j in range(2**schema)) for schema in range(MAX_SCHEMA + 1))


def bucket_index(value: float, schema: int) -> int:
    """The index of the bucket (base^(i−1), base^i] that holds a value > 0 (+Inf: one past max)."""
    if value == math.inf:
        return bucket_index(sys.float_info.max, schema) + 1
    frac, exp = math.frexp(value)
    if schema > 0:
        bounds = BOUNDS[schema]
        return bisect_left(bounds, frac) + (exp - 1) * len(bounds)
    # Schema 0: one bucket per power of two, (2^(exp−1), 2^exp]; an exact power of two
    # (frac 0.5) ends the bucket below. Negative schemas merge 2^−s of those: ceil(key / 2^−s).
    key = exp - 1 if frac == 0.5 else exp
    return -(-key >> -schema)


class NativeBuckets:
    """The sparse buckets of one native histogram: schema, zero bucket, populated buckets."""

    __slots__ = ("max_buckets", "negative", "positive", "schema", "zero_count",
                 "zero_threshold")

    def __init__(self, schema: int = 3, max_buckets: int = 160,
                 zero_threshold: float = DEFAULT_ZERO_THRESHOLD) -> None:
        if not MIN_SCHEMA <= schema <= MAX_SCHEMA:
            raise ValueError(f"schema must be between {MIN_SCHEMA} and {MAX_SCHEMA}, not {schema}")
        if max_buckets < 0:
            raise ValueError(f"max_buckets must be 0 (no limit) or more, not {max_buckets}")
        if not zero_threshold >= 0:
            raise ValueError(f"zero_threshold must be 0 or more, not {zero_threshold}")
        self.schema = schema
        self.max_buckets = max_buckets
        self.zero_threshold = zero_threshold
        self.zero_count = 0
        self.positive: dict[int, int] = {}
        self.negative: dict[int, int] = {}

    def observe(self, value: float) -> None:
        """Count one value (NaN is not bucketed; the caller's count still includes it)."""
        if value > self.zero_threshold:
            buckets = self.positive
        elif value < -self.zero_threshold:
            buckets, value = self.negative, -value
        else:
            if not math.isnan(value):
                self.zero_count += 1
            return
        schema = self.schema
        if schema > 0 and value != math.inf:  # bucket_index, inlined for the common case
            frac, exp = math.frexp(value)
            bounds = BOUNDS[schema]
            index = bisect_left(bounds, frac) + (exp - 1) * len(bounds)
        else:
            index = bucket_index(value, schema)
        count = buckets.get(index)
        if count is not None:
            buckets[index] = count + 1
            return
        buckets[index] = 1
        if self.max_buckets and len(self.positive) + len(self.negative) > self.max_buckets:
            self._reduce()

    def snapshot(self) -> NativeBuckets:
        """A copy that later observations leave alone (for rendering in another thread)."""
        copy = NativeBuckets.__new__(NativeBuckets)
        copy.schema, copy.max_buckets = self.schema, self.max_buckets
        copy.zero_threshold, copy.zero_count = self.zero_threshold, self.zero_count
        copy.positive, copy.negative = self.positive.copy(), self.negative.copy()
        return copy

    def _reduce(self) -> None:
        """Halve the resolution until the populated buckets fit the limit (or schema is −4)."""
        while (len(self.positive) + len(self.negative) > self.max_buckets
               and self.schema > MIN_SCHEMA):
            self.schema -= 1
            self.positive = _merge_pairs(self.positive)
            self.negative = _merge_pairs(self.negative)

    def bucket_count(self) -> int:
        """How many buckets are populated (zero bucket excluded)."""
        return len(self.positive) + len(self.negative)


def _merge_pairs(buckets: dict[int, int]) -> dict[int, int]:
    """The same counts at half the resolution: buckets 2j−1 and 2j become bucket j."""
    merged: dict[int, int] = {}
    for index, count in buckets.items():
        wider = (index + 1) >> 1  # ceil(index / 2)
        merged[wider] = merged.get(wider, 0) + count
    return merged


def spans_and_deltas(buckets: dict[int, int]) -> tuple[list[tuple[int, int]], list[int]]:
    """The exposition form of sparse buckets: (offset, length) spans and count deltas.

    The first span's offset is the first index, later offsets the gap since the previous span;
    each delta is a bucket's count minus the previous bucket's. Gaps of one or two empty buckets
    are filled with zero counts instead of opening a span, as client_golang does (cheaper).
    """
    if not buckets:
        return [], []
    indexes = sorted(buckets)
    counts = [buckets[i] for i in indexes]
    steps = [b - a for a, b in pairwise(indexes)]  # 1: the next bucket is adjacent
    if max(steps, default=1) == 1:
        return [(indexes[0], len(indexes))], _deltas(counts)
    spans: list[tuple[int, int]] = []
    filled: list[int] = []  # the counts of every bucket the spans cover, empty ones as 0
    offset, length, run_start = indexes[0], 0, 0
    for k in [k for k, step in enumerate(steps) if step > 1]:  # a gap after bucket k
        filled.extend(counts[run_start:k + 1])
        length += k + 1 - run_start
        empty = steps[k] - 1
        if empty > 2:
            spans.append((offset, length))
            offset, length = empty, 0
        else:
            filled.extend([0] * empty)
            length += empty
        run_start = k + 1
    filled.extend(counts[run_start:])
    spans.append((offset, length + len(counts) - run_start))
    return spans, _deltas(filled)


def _deltas(counts: list[int]) -> list[int]:
    """Each count minus the one before it (the first minus 0); this runs on across spans."""
    return [c - p for c, p in zip(counts, [0, *counts[:-1]], strict=True)]

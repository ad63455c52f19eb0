"""Native (exponential) histogram buckets: Prometheus' bucket math, dense counts, a bucket limit.

At schema s (−4…8) every power of two is split into 2^s buckets: bucket i covers
(base^(i−1), base^i] with base = 2^(2^−s), so bucket 0 ends at 1 and every bucket is the same
relative width (schema 3: 9 %, schema 5: 2.2 %). Values with |v| ≤ the zero threshold are
counted in the zero bucket. The index is found as client_golang finds it, without a logarithm:
`math.frexp` splits v into frac·2^exp with frac in [0.5, 1), and a table of where each of the
2^s buckets starts inside [0.5, 1) gives the position (a binary search over ≤ 256 floats).

Counts are dense: per sign, one `array('I')` from the lowest populated index to the highest
(4 bytes a bucket, no object per bucket: thousands of series keep a dozen histograms each; an
array whose count would pass 2^32 − 1 becomes 8 bytes a count, see `widened`).
When more buckets are populated than the limit, the resolution is halved (schema − 1, buckets
merged pairwise) until they fit, as client_golang's `NativeHistogramMaxBucketNumber` does; the
same happens when the dense range grows wider than MAX_WIDTH_FACTOR × the limit (a value far
from all others, e.g. a server-reported duration of 1e-300 s, would otherwise cost megabytes).
Resolution is never raised again. The sample count and sum belong to the caller, who shares
them with the classic buckets of the same histogram.
"""

from __future__ import annotations

import functools
import math
import sys
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from typing import cast

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


# The dense range of a histogram with a bucket limit may be this many times the limit (and
# always MIN_WIDTH buckets); with no limit (max_buckets 0), at most NO_LIMIT_WIDTH (512 KiB).
MAX_WIDTH_FACTOR = 4
MIN_WIDTH = 256
NO_LIMIT_WIDTH = 65536
_NO_COUNTS: Sequence[int] = ()  # a side without observations (no array until the first)
COUNT_TYPE = "I"  # array typecode of counts (4 bytes) until one needs more (see `widened`)


def zeros(n: int) -> array[int]:
    """`n` zero counts."""
    return array(COUNT_TYPE, bytes(4 * n))


def widened(counts: Sequence[int]) -> array[int]:
    """The same counts, 8 bytes each: `array('I')` raises OverflowError past 2^32 − 1 (a busy
    inter-chunk bucket after months), so the array that would overflow is replaced by this."""
    return array("q", counts)


class NativeBuckets:
    """The buckets of one native histogram: schema, zero bucket, dense counts per sign.

    `positive_counts[k]` is the count of bucket `positive_offset + k` (likewise negative, for
    the absolute values of negative observations); the first and last counts are never 0.
    """

    __slots__ = ("max_buckets", "max_width", "negative_counts", "negative_offset", "populated",
                 "positive_counts", "positive_offset", "schema", "zero_count", "zero_threshold")

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
        self.max_width = _max_width(max_buckets)
        self.zero_threshold = zero_threshold
        self.zero_count = 0
        self.populated = 0  # buckets with a count (zero bucket excluded)
        self.positive_counts = self.negative_counts = _NO_COUNTS
        self.positive_offset = self.negative_offset = 0

    def observe(self, value: float) -> None:
        """Count one value (NaN is not bucketed; the caller's count still includes it)."""
        if value > self.zero_threshold:
            negative = False
        elif value < -self.zero_threshold:
            negative, value = True, -value
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
        if negative:
            counts, k = self.negative_counts, index - self.negative_offset
        else:
            counts, k = self.positive_counts, index - self.positive_offset
        if 0 <= k < len(counts):
            count = counts[k]
            try:
                # k in range: counts is an array (only the empty _NO_COUNTS is not)
                counts[k] = count + 1  # type: ignore[index]
            except OverflowError:
                self._widen_type(negative)[k] = count + 1
            if count:
                return
        else:
            self._widen(negative, index)
        self.populated += 1
        if ((self.max_buckets and self.populated > self.max_buckets)
                or len(self.positive_counts) + len(self.negative_counts) > self.max_width):
            self._reduce()

    def _widen_type(self, negative: bool) -> array[int]:
        """One side's counts as 8-byte counts (see `widened`)."""
        if negative:
            wide = self.negative_counts = widened(self.negative_counts)
        else:
            wide = self.positive_counts = widened(self.positive_counts)
        return wide

    def _widen(self, negative: bool, index: int) -> None:
        """Extend one side's dense range to `index` and count 1 there."""
        counts = self.negative_counts if negative else self.positive_counts
        offset = self.negative_offset if negative else self.positive_offset
        if not counts:
            wider, offset = array(COUNT_TYPE, (1,)), index
        elif index < offset:
            dense = cast("array[int]", counts)  # not empty: an array (only _NO_COUNTS is not)
            wider = array(dense.typecode, bytes(dense.itemsize * (offset - index)))
            wider[0] = 1
            wider.extend(dense)
            offset = index
        else:
            dense = cast("array[int]", counts)  # likewise
            wider = array(dense.typecode, dense)
            wider.frombytes(bytes(wider.itemsize * (index - offset - len(counts))))
            wider.append(1)
        if negative:
            self.negative_counts, self.negative_offset = wider, offset
        else:
            self.positive_counts, self.positive_offset = wider, offset

    def snapshot(self) -> NativeBuckets:
        """A copy that later observations leave alone (for rendering in another thread)."""
        copy = NativeBuckets.__new__(NativeBuckets)
        copy.schema, copy.max_buckets, copy.max_width = self.schema, self.max_buckets, \
            self.max_width
        copy.zero_threshold, copy.zero_count = self.zero_threshold, self.zero_count
        copy.populated = self.populated
        copy.positive_counts, copy.positive_offset = self.positive_counts[:], self.positive_offset
        copy.negative_counts, copy.negative_offset = self.negative_counts[:], self.negative_offset
        return copy

    def _reduce(self) -> None:
        """Halve the resolution until the buckets fit the limits (or schema is −4)."""
        while (((self.max_buckets and self.populated > self.max_buckets)
                or len(self.positive_counts) + len(self.negative_counts) > self.max_width)
               and self.schema > MIN_SCHEMA):
            self.schema -= 1
            self.positive_counts, self.positive_offset = _merge_pairs(
                self.positive_counts, self.positive_offset)
            self.negative_counts, self.negative_offset = _merge_pairs(
                self.negative_counts, self.negative_offset)
            self.populated = sum(1 for c in self.positive_counts if c) + sum(
                1 for c in self.negative_counts if c)

    def bucket_count(self) -> int:
        """How many buckets are populated (zero bucket excluded)."""
        return self.populated

    @property
    def positive(self) -> dict[int, int]:
        """The populated positive buckets as {index: count}."""
        return _sparse(self.positive_counts, self.positive_offset)

    @property
    def negative(self) -> dict[int, int]:
        """The populated negative buckets (by absolute value) as {index: count}."""
        return _sparse(self.negative_counts, self.negative_offset)


@functools.cache
def _max_width(max_buckets: int) -> int:
    """The widest dense range for a bucket limit (one int object shared by all histograms)."""
    return max(max_buckets * MAX_WIDTH_FACTOR, MIN_WIDTH) if max_buckets else NO_LIMIT_WIDTH


def _sparse(counts: Sequence[int], offset: int) -> dict[int, int]:
    return {offset + k: count for k, count in enumerate(counts) if count}


def _merge_pairs(counts: Sequence[int], offset: int) -> tuple[Sequence[int], int]:
    """The same counts at half the resolution: buckets 2j−1 and 2j become bucket j."""
    if not counts:
        return counts, offset
    wider = (offset + 1) >> 1  # ceil(index / 2)
    merged = [0] * (((offset + len(counts)) >> 1) - wider + 1)
    for k, count in enumerate(counts):
        if count:
            merged[((offset + k + 1) >> 1) - wider] += count
    try:
        return array(COUNT_TYPE, merged), wider
    except OverflowError:
        return widened(merged), wider


_RUN_OF_EMPTY = b"\0\0\0"


def spans_and_deltas(counts: Sequence[int], offset: int = 0
                     ) -> tuple[list[tuple[int, int]], list[int]]:
    """The exposition form of dense buckets: (offset, length) spans and count deltas.

    The first span's offset is the first populated index, later offsets the gap since the
    previous span; each delta is a bucket's count minus the previous bucket's. Gaps of one or
    two empty buckets stay inside a span as zero counts instead of opening a new one, as
    client_golang does (cheaper).
    """
    populated = bytes(map(bool, counts))
    first = populated.find(1)
    if first < 0:
        return [], []
    end = populated.rfind(1) + 1
    gap = populated.find(_RUN_OF_EMPTY, first, end)
    if gap < 0:  # one span (the common case)
        covered = list(counts[first:end])
        spans = [(offset + first, end - first)]
    else:
        spans, covered, start, span_offset = [], [], first, offset + first
        while gap >= 0:
            resume = populated.find(1, gap)
            spans.append((span_offset, gap - start))
            covered.extend(counts[start:gap])
            span_offset, start = resume - gap, resume
            gap = populated.find(_RUN_OF_EMPTY, start, end)
        spans.append((span_offset, end - start))
        covered.extend(counts[start:end])
    return spans, [c - p for c, p in zip(covered, [0, *covered[:-1]], strict=True)]

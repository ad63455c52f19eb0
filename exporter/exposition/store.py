"""The values of every probe series, kept compactly: the store the renderings walk.

Each series keeps its histogram children (counts in arrays, native buckets, sum, exemplars) and
its counter and gauge children (one float each) by slot: the same child (family, extra label
value) has the same slot in every series of a collector (`Layout`), so a series holds an array
and a list instead of two dicts with a key per child. A series also holds its cached renderings
(one entry per `Format`, filled by `writers.render`) and the encoded label pairs they reuse.

Threads. Only the probing event loop writes values (`create`, `remove`, `observe`, `inc`,
`set`); renders run in worker threads while it does, without a lock and without copying the
whole state first. What makes that safe under CPython's GIL:
- a render takes each container's items in one C-level call (`list(d.items())`, an array
  slice), which no other thread interrupts; no container changes size while it is iterated,
  and a child removed meanwhile is simply rendered one last time;
- counts are ints and floats read one at a time: a text render that overlaps an observation
  may include it in some buckets and not in others, but computes `_count` from the same pass
  as `+Inf`, so every page is a valid histogram (monotonic buckets, `_count` = `+Inf`); the
  observation shows fully on the next scrape;
- protobuf (native histograms must agree exactly with their count) reads a histogram only
  between two observations (`Histogram.writing`, a sequence counter): it encodes the live
  values and keeps the bytes if no observation began meanwhile, else encodes a copy taken
  between two observations;
- the version is read before rendering and a cache entry is stored under it, so a write during
  a render leaves the entry stale and the next scrape renders again;
- render threads write only caches (one list item or attribute per series), each a single
  atomic assignment; two renders of one format at once may both fill an entry, either is right.
A test renders in threads while the loop records and checks every page.
"""

from __future__ import annotations

import bisect
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from exporter.exposition.families import Family, FamilySpec, MetricType
from exporter.exposition.nativehist import MIN_SCHEMA, NativeBuckets, widened, zeros

Child = tuple[Family, str | None]  # a family and the value of its extra label
ExemplarValue = tuple[str, float, float]  # response id, observed value, unix time
SeriesKey = tuple[str, str, str]
T = TypeVar("T")
_HISTOGRAM = MetricType.HISTOGRAM


class Format(IntEnum):
    """The renderings a series caches (the value is its slot in the series' cache list)."""

    TEXT = 0
    OPENMETRICS = 1
    PROTOBUF = 2  # classic buckets kept
    PROTOBUF_NATIVE = 3  # native buckets only

    @property
    def is_text(self) -> bool:
        """Prometheus text or OpenMetrics (they share the encoded label pairs)."""
        return self in (Format.TEXT, Format.OPENMETRICS)


@dataclass(frozen=True)
class NativeSettings:
    """Native histogram resolution of every probe histogram (`global.native_histograms`)."""

    schema: int = 3
    max_buckets: int = 160


DEFAULT_NATIVE = NativeSettings()


@dataclass(slots=True)
class Histogram:
    """One histogram child: classic counts, native buckets, sum, exemplars."""

    counts: array[int]  # per bucket (not cumulative); the last is +Inf (see `nativehist.zeros`)
    native: NativeBuckets
    total: float = 0.0
    # The latest exemplar per bucket, for the families that have them (else None).
    exemplars: list[ExemplarValue | None] | None = None
    # Odd while an observation is half written. Renders run in a worker thread and the
    # protobuf page must not show a count that disagrees with its buckets (Prometheus rejects
    # such a native histogram), so they copy a histogram only while this is even and unchanged.
    writing: int = 0

    def consistent(self, read: Callable[[array[int], float, NativeBuckets,
                                         list[ExemplarValue | None] | None], T]) -> T:
        """`read` over counts, sum, native buckets and exemplars from one moment (call off the
        loop): over the live values when no observation came in meanwhile (no copies; the
        common case), else over a snapshot. `read` must not keep what it is given."""
        mark = self.writing
        if not mark & 1:
            out = read(self.counts, self.total, self.native, self.exemplars)
            if self.writing == mark:
                return out
        return read(*self.snapshot())

    def snapshot(self) -> tuple[array[int], float, NativeBuckets,
                                list[ExemplarValue | None] | None]:
        """Counts, sum, native buckets and exemplars from one moment (call off the loop)."""
        while True:
            mark = self.writing
            if not mark & 1:
                exemplars = self.exemplars
                copy = (self.counts[:], self.total, self.native.snapshot(),
                        None if exemplars is None else exemplars.copy())
                if self.writing == mark:
                    return copy
            time.sleep(0)  # let the loop finish that observation


class Layout:
    """Slot numbers of the children of one collector's series.

    The same child (family, extra label value) has the same slot in every series, so a series
    keeps its values in an array and a list indexed by slot instead of two dicts with a key per
    child (~1.5 KiB less per series). Slots are handed out as children first appear; a series
    without a child leaves its slot empty.
    """

    __slots__ = ("histogram_keys", "histograms", "scalar_keys", "scalars")

    def __init__(self) -> None:
        self.histograms: dict[Child, int] = {}
        self.scalars: dict[Child, int] = {}
        self.histogram_keys: list[Child] = []  # by slot
        self.scalar_keys: list[Child] = []

    def histogram_slot(self, key: Child) -> int:
        """The slot of a histogram child (a new one if no series had it yet)."""
        slot = self.histograms.get(key)
        if slot is None:
            self.histogram_keys.append(key)
            slot = self.histograms[key] = len(self.histogram_keys) - 1
        return slot

    def scalar_slot(self, key: Child) -> int:
        """The slot of a counter or gauge child (a new one if no series had it yet)."""
        slot = self.scalars.get(key)
        if slot is None:
            self.scalar_keys.append(key)
            slot = self.scalars[key] = len(self.scalar_keys) - 1
        return slot


ByFamily = tuple[dict[Family, list[tuple[str | None, Histogram]]],
                 dict[Family, list[tuple[str | None, float]]]]


class SeriesValues:
    """The values of one probe series, and the cached renderings of them."""

    __slots__ = ("_families", "_histograms", "_info", "_layout", "_native", "_present",
                 "_scalars", "cache", "label_items", "proto_labels", "text_labels", "version")

    def __init__(self, label_items: Sequence[tuple[str, str]],
                 families: dict[Family, FamilySpec], native: NativeSettings = DEFAULT_NATIVE,
                 layout: Layout | None = None) -> None:
        self.label_items = tuple(label_items)
        self._families = families
        self._native = native
        self._layout = Layout() if layout is None else layout
        self._histograms: list[Histogram | None] = []  # by slot
        self._scalars = array("d")  # by slot; a slot's value counts if its bit in _present is set
        self._present = 0
        self._info: dict[Family, tuple[tuple[str, str], ...]] = {}  # an info family's labels
        self.version = 0
        # Per Format: (version, bytes of every family in the collector's order), by renders.
        self.cache: list[tuple[int, tuple[bytes, ...]] | None] | None = None
        # The label pairs as each encoding writes them, made by the writers on first need.
        self.text_labels: Any = None
        self.proto_labels: Any = None

    def create(self, family: Family, extra: str | None = None) -> None:
        """Make a child exist (value 0) before anything is recorded."""
        spec = self._families[family]
        if spec.type is _HISTOGRAM:
            slot = self._layout.histogram_slot((family, extra))
            histograms = self._histograms
            if slot < len(histograms) and histograms[slot] is not None:
                return
            # A histogram served as sum and count (no finite edges) keeps its native part at
            # the coarsest resolution: still one native series, next to no buckets.
            native = NativeBuckets(self._native.schema if spec.buckets else MIN_SCHEMA,
                                   self._native.max_buckets)
            if slot >= len(histograms):
                histograms.extend([None] * (slot + 1 - len(histograms)))
            histograms[slot] = Histogram(zeros(len(spec.buckets) + 1), native)
        else:
            slot = self._layout.scalar_slot((family, extra))
            if self._present >> slot & 1:
                return
            self._put(slot, 0.0)
        self.version += 1

    def _put(self, slot: int, value: float) -> None:
        values = self._scalars
        if slot >= len(values):
            values.frombytes(bytes(8 * (slot + 1 - len(values))))
        values[slot] = value
        self._present |= 1 << slot  # after the value: a render never sees an unset slot

    def remove(self, family: Family, extra: str | None = None) -> None:
        """Drop a child."""
        slot = self._layout.histograms.get((family, extra))
        if slot is not None and slot < len(self._histograms):
            self._histograms[slot] = None
        slot = self._layout.scalars.get((family, extra))
        if slot is not None:
            self._present &= ~(1 << slot)
        self.version += 1

    def has(self, family: Family, extra: str | None = None) -> bool:
        """Whether the series has this child."""
        slot = self._layout.histograms.get((family, extra))
        if slot is not None:
            return slot < len(self._histograms) and self._histograms[slot] is not None
        slot = self._layout.scalars.get((family, extra))
        return slot is not None and bool(self._present >> slot & 1)

    def histogram(self, family: Family, extra: str | None = None) -> Histogram:
        """A histogram child of this series (KeyError if it has none)."""
        slot = self._layout.histograms[(family, extra)]
        hist = self._histograms[slot] if slot < len(self._histograms) else None
        if hist is None:
            raise KeyError((family, extra))
        return hist

    def observe(self, family: Family, value: float, extra: str | None = None,
                exemplar: str | None = None) -> None:
        """Add one observation to a histogram child."""
        spec = self._families[family]
        hist = self.histogram(family, extra)
        index = bisect.bisect_left(spec.buckets, value)
        hist.writing += 1
        try:
            hist.counts[index] += 1
        except OverflowError:
            hist.counts = widened(hist.counts)
            hist.counts[index] += 1
        hist.native.observe(value)
        hist.total += value
        if exemplar is not None:
            if hist.exemplars is None:
                hist.exemplars = [None] * len(hist.counts)
            hist.exemplars[index] = (exemplar, value, time.time())
        hist.writing += 1
        self.version += 1

    def observe_many(self, family: Family, values: Iterable[float],
                     extra: str | None = None) -> None:
        """Add several observations (without exemplars) to a histogram child at once."""
        edges = self._families[family].buckets
        hist = self.histogram(family, extra)
        counts, native, find = hist.counts, hist.native, bisect.bisect_left
        hist.writing += 1
        for value in values:
            index = find(edges, value)
            try:
                counts[index] += 1
            except OverflowError:
                counts = hist.counts = widened(counts)
                counts[index] += 1
            native.observe(value)
            hist.total += value
        hist.writing += 1
        self.version += 1

    def inc(self, family: Family, amount: float = 1.0, extra: str | None = None) -> None:
        """Increase a counter child (created when the series was)."""
        slot = self._layout.scalars[(family, extra)]
        if not self._present >> slot & 1:
            raise KeyError((family, extra))
        self._scalars[slot] += amount
        self.version += 1

    def set(self, family: Family, value: float, extra: str | None = None) -> None:
        """Set a gauge child (creating it if needed)."""
        self._put(self._layout.scalar_slot((family, extra)), value)
        self.version += 1

    def set_info(self, family: Family, labels: Sequence[tuple[str, str]]) -> None:
        """Set an info family's one child to 1 with these label pairs (replacing the old)."""
        self._info[family] = tuple(labels)  # before the value: a render never sees it without
        self._put(self._layout.scalar_slot((family, None)), 1.0)
        self.version += 1

    def info(self, family: Family) -> tuple[tuple[str, str], ...] | None:
        """The label pairs of an info family's child, if it has one."""
        return self._info.get(family) if self.get(family) is not None else None

    def get(self, family: Family, extra: str | None = None) -> float | None:
        """A scalar child's value."""
        slot = self._layout.scalars.get((family, extra))
        if slot is None or not self._present >> slot & 1:
            return None
        return self._scalars[slot]

    def histogram_items(self) -> list[tuple[Child, Histogram]]:
        """The histogram children, in slot order."""
        keys = self._layout.histogram_keys
        return [(keys[slot], hist) for slot, hist in enumerate(list(self._histograms))
                if hist is not None]

    def scalar_items(self) -> list[tuple[Child, float]]:
        """The counter and gauge children with their values, in slot order."""
        keys, present = self._layout.scalar_keys, self._present  # bits before values
        return [(keys[slot], value) for slot, value in enumerate(self._scalars[:])
                if present >> slot & 1]

    def children(self) -> list[Child]:
        """Every child of the series (histograms first), in slot order."""
        return [child for child, _ in self.histogram_items()] + [
            child for child, _ in self.scalar_items()]

    def extras(self, family: Family) -> list[str | None]:
        """The extra label values of the scalar children of one family."""
        return [extra for (key, extra), _ in self.scalar_items() if key is family]

    def by_family(self) -> ByFamily:
        """The children grouped by family, each family in creation order (one pass)."""
        histograms: dict[Family, list[tuple[str | None, Histogram]]] = {}
        for (family, extra), hist in self.histogram_items():
            histograms.setdefault(family, []).append((extra, hist))
        scalars: dict[Family, list[tuple[str | None, float]]] = {}
        for (family, extra), value in self.scalar_items():
            scalars.setdefault(family, []).append((extra, value))
        return histograms, scalars

    def forget(self, fmt: Format) -> None:
        """Drop the cache of one format (it is not scraped any more), and the encoded labels
        once no format of their encoding is cached."""
        cache = self.cache
        if cache is None:
            return
        cache[fmt] = None
        if not any(cache[f] for f in Format if f.is_text == fmt.is_text):
            if fmt.is_text:
                self.text_labels = None
            else:
                self.proto_labels = None

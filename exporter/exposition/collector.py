"""Per-series probe metrics with an incremental renderer.

With thousands of series the probe families dominate the page (~200 lines or ~40 protobuf
records per series), and prometheus_client's generic renderer takes ~10 µs a line: 5,000 series
would cost ~10 s per scrape. Here each series keeps its values compactly (histogram counts in
arrays, see `nativehist`) and, per exposition format, its rendered bytes of every family, rebuilt
only after that series recorded something; a scrape mostly joins cached bytes.

Caches cost memory (a series' protobuf records are ~4.5 KiB, its text ~15 KiB), so a format's
caches exist only while that format is scraped: built at its first render, dropped from every
series when it has not been rendered for CACHE_IDLE seconds (or IDLE_GAPS times its usual
scrape interval, if longer). A server scraped only in protobuf keeps no text.

Between scrapes, a refresher thread re-renders the series that recorded something into the
caches of the formats being scraped (every REFRESH_MIN…REFRESH_MAX seconds, a tenth of the
scrape interval): re-encoding a series costs 100–250 µs, and with thousands of series a third of
them change between two scrapes, which would make each scrape wait for ~0.5 s of encoding. Spread
out, the same work leaves a scrape only the last second's changes, and holds the GIL in short
stretches instead of one long one. The thread ends when no format is scraped any more.

`ProbeCollector` is also a regular prometheus_client collector: `collect()` yields standard
metric families, so `registry.get_sample_value`, `name[]` filtering and the library's own
renderers see exactly the same values (a test compares both renderings line by line).

Every histogram child also keeps native (exponential) buckets, filled at record time, for the
protobuf exposition (`protobuf_chunks`), which is cached per series the same way.

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
- protobuf (native histograms must agree exactly with their count) copies a histogram only
  between two observations (`_Histogram.writing`, a sequence counter);
- the version is read before rendering and a cache entry is stored under it, so a write during
  a render leaves the entry stale and the next scrape renders again;
- render threads write only caches (one list item or attribute per series), each a single
  atomic assignment; two renders of one format at once may both fill an entry, either is right.
A test renders in threads while the loop records and checks every page.
"""

from __future__ import annotations

import bisect
import functools
import math
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from exporter.config import SeriesKey
from exporter.exposition import protobuf
from exporter.exposition.families import Family, FamilySpec, MetricType
from exporter.exposition.nativehist import NativeBuckets, widened, zeros

_COUNT_TEXT = [floatToGoString(float(i)) for i in range(4096)]


def _count(value: int) -> str:
    """floatToGoString for a bucket count, from a table for the common small values."""
    return _COUNT_TEXT[value] if value < 4096 else floatToGoString(value)


_PROTO_TYPES = {MetricType.COUNTER: protobuf.MetricType.COUNTER,
                MetricType.GAUGE: protobuf.MetricType.GAUGE,
                MetricType.HISTOGRAM: protobuf.MetricType.HISTOGRAM}
_HISTOGRAM, _COUNTER = MetricType.HISTOGRAM, MetricType.COUNTER
Child = tuple[Family, str | None]  # a family and the value of its extra label
ExemplarValue = tuple[str, float, float]  # response id, observed value, unix time
# A format's caches are dropped when it was not rendered for this long (seconds), or for
# IDLE_GAPS times the time between its last two renders, whichever is longer.
CACHE_IDLE = 120.0
IDLE_GAPS = 3.0
# Seconds between two refreshes of the caches: a tenth of the scrape interval, within these.
REFRESH_MIN, REFRESH_MAX = 0.5, 2.0
BLOCK_SIZE = 1 << 18  # bytes: a page is sent in blocks of about this size (see `blocks`)


class Format(IntEnum):
    """The renderings a series caches (the value is its slot in the series' cache list)."""

    TEXT = 0
    OPENMETRICS = 1
    PROTOBUF = 2  # classic buckets kept
    PROTOBUF_NATIVE = 3  # native buckets only


_TEXT_FORMATS = (Format.TEXT, Format.OPENMETRICS)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


@dataclass(frozen=True)
class NativeSettings:
    """Native histogram resolution of every probe histogram (`global.native_histograms`)."""

    schema: int = 3
    max_buckets: int = 160


DEFAULT_NATIVE = NativeSettings()


@dataclass(slots=True)
class _Histogram:
    counts: array[int]  # per bucket (not cumulative); the last is +Inf (see `nativehist.zeros`)
    native: NativeBuckets
    total: float = 0.0
    # The latest exemplar per bucket, for the families that have them (else None).
    exemplars: list[ExemplarValue | None] | None = None
    # Odd while an observation is half written. Renders run in a worker thread and the
    # protobuf page must not show a count that disagrees with its buckets (Prometheus rejects
    # such a native histogram), so they copy a histogram only while this is even and unchanged.
    writing: int = 0

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


class SeriesValues:
    """The values of one probe series and its cached renderings."""

    __slots__ = ("_cache", "_families", "_histograms", "_info", "_layout", "_native",
                 "_present", "_proto_pairs", "_scalars", "_text_pairs", "label_items", "version")

    def __init__(self, label_items: Sequence[tuple[str, str]],
                 families: dict[Family, FamilySpec], native: NativeSettings = DEFAULT_NATIVE,
                 layout: Layout | None = None) -> None:
        self.label_items = tuple(label_items)
        self._families = families
        self._native = native
        self._layout = Layout() if layout is None else layout
        self._histograms: list[_Histogram | None] = []  # by slot
        self._scalars = array("d")  # by slot; a slot's value counts if its bit in _present is set
        self._present = 0
        self._info: dict[Family, tuple[tuple[str, str], ...]] = {}  # an info family's labels
        self.version = 0
        # Per Format: (version, bytes of every family in `families` order), built by renders.
        self._cache: list[tuple[int, tuple[bytes, ...]] | None] | None = None
        self._proto_pairs: tuple[tuple[str, bytes], ...] | None = None
        self._text_pairs: tuple[tuple[str, str], ...] | None = None

    def create(self, family: Family, extra: str | None = None) -> None:
        """Make a child exist (value 0) before anything is recorded."""
        spec = self._families[family]
        if spec.type is _HISTOGRAM:
            slot = self._layout.histogram_slot((family, extra))
            histograms = self._histograms
            if slot < len(histograms) and histograms[slot] is not None:
                return
            native = NativeBuckets(self._native.schema, self._native.max_buckets)
            if slot >= len(histograms):
                histograms.extend([None] * (slot + 1 - len(histograms)))
            histograms[slot] = _Histogram(zeros(len(spec.buckets) + 1), native)
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

    def _histogram(self, family: Family, extra: str | None) -> _Histogram:
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
        hist = self._histogram(family, extra)
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
        hist = self._histogram(family, extra)
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

    def histogram_items(self) -> list[tuple[Child, _Histogram]]:
        """The histogram children, in slot order."""
        keys = self._layout.histogram_keys
        return [(keys[slot], hist) for slot, hist in enumerate(list(self._histograms))
                if hist is not None]

    def scalar_items(self) -> list[tuple[Child, float]]:
        """The counter and gauge children with their values, in slot order."""
        keys, present = self._layout.scalar_keys, self._present  # bits before values
        return [(keys[slot], value) for slot, value in enumerate(self._scalars[:])
                if present >> slot & 1]

    def extras(self, family: Family) -> list[str | None]:
        """The extra label values of the scalar children of one family."""
        return [extra for (key, extra), _ in self.scalar_items() if key is family]

    # -- rendering ------------------------------------------------------------------------

    def rendered(self, fmt: Format, specs: Sequence[FamilySpec]) -> tuple[bytes, ...]:
        """This series' bytes of every family in `specs` (the collector's, in its order) in
        one format, from the cache unless the series changed since it was built."""
        cache = self._cache
        version = self.version
        if cache is None:
            cache = self._cache = [None] * len(Format)
        else:
            entry = cache[fmt]
            if entry is not None and entry[0] == version:
                return entry[1]
        if fmt in _TEXT_FORMATS:
            pieces = self._render_text(specs, fmt is Format.OPENMETRICS)
        else:
            pieces = self._render_protobuf(specs, fmt is Format.PROTOBUF)
        cache[fmt] = (version, pieces)
        return pieces

    def forget(self, fmt: Format) -> None:
        """Drop the cache of one format (it is not scraped any more)."""
        cache = self._cache
        if cache is not None:
            cache[fmt] = None
            if fmt in _TEXT_FORMATS and not any(cache[f] for f in _TEXT_FORMATS):
                self._text_pairs = None
            if fmt not in _TEXT_FORMATS and not any(
                    cache[f] for f in Format if f not in _TEXT_FORMATS):
                self._proto_pairs = None

    def _by_family(self) -> tuple[dict[Family, list[tuple[str | None, _Histogram]]],
                                  dict[Family, list[tuple[str | None, float]]]]:
        """The children grouped by family, each family in creation order (one pass)."""
        histograms: dict[Family, list[tuple[str | None, _Histogram]]] = {}
        for (family, extra), hist in self.histogram_items():
            histograms.setdefault(family, []).append((extra, hist))
        scalars: dict[Family, list[tuple[str | None, float]]] = {}
        for (family, extra), value in self.scalar_items():
            scalars.setdefault(family, []).append((extra, value))
        return histograms, scalars

    def _render_protobuf(self, specs: Sequence[FamilySpec], classic: bool
                         ) -> tuple[bytes, ...]:
        histograms, scalars = self._by_family()
        pairs = self._proto_pairs
        if pairs is None:
            pairs = self._proto_pairs = tuple(
                (name, protobuf.labels(((name, value),)))
                for name, value in sorted(self.label_items))
        names = [name for name, _ in pairs]
        out: list[bytes] = []
        for spec in specs:
            records: list[bytes] = []
            # Label pairs sorted by name, as Prometheus writes them: the extra label's pair
            # goes between these two runs.
            split = len(pairs) if spec.label is None else bisect.bisect_left(names, spec.label)
            before = b"".join([encoded for _, encoded in pairs[:split]])
            after = b"".join([encoded for _, encoded in pairs[split:]])
            label = spec.label
            if spec.type is _HISTOGRAM:
                layout = _classic_buckets(spec.buckets) if classic else None
                for extra, hist in histograms.get(spec.key, ()):
                    counts, total, native, exemplars = hist.snapshot()
                    examples = _proto_exemplars(exemplars)
                    records.append(protobuf.histogram(
                        before + after if extra is None or label is None
                        else before + _proto_pair(label, extra) + after,
                        sum(counts), total, classic=layout, counts=counts,
                        exemplars=examples if classic else (), native=native,
                        native_exemplars=() if classic else
                        [e for e in examples if e is not None]))
            else:
                encode = protobuf.counter if spec.type is _COUNTER else protobuf.gauge
                for extra, value in scalars.get(spec.key, ()):
                    if spec.info:
                        records.append(encode(protobuf.labels(tuple(sorted(
                            (*self.label_items, *self._info.get(spec.key, ()))))), value))
                        continue
                    records.append(encode(
                        before + after if extra is None or label is None
                        else before + _proto_pair(label, extra) + after, value))
            out.append(b"".join(records))
        return tuple(out)

    def _label_texts(self, spec: FamilySpec, extra: str | None) -> list[tuple[str, str]]:
        """A child's `name="value"` pairs, sorted by name."""
        pairs = self._text_pairs
        if pairs is None:
            pairs = self._text_pairs = tuple(
                (name, f'{name}="{_escape(value)}"') for name, value in sorted(self.label_items))
        if spec.info:
            return sorted([*pairs, *((name, f'{name}="{_escape(value)}"')
                                     for name, value in self._info.get(spec.key, ()))])
        if extra is None or spec.label is None:
            return list(pairs)
        return sorted([*pairs, (spec.label, f'{spec.label}="{_escape(extra)}"')])

    def _render_text(self, specs: Sequence[FamilySpec], openmetrics: bool
                     ) -> tuple[bytes, ...]:
        histograms, scalars = self._by_family()
        fmt = floatToGoString
        out: list[bytes] = []
        for spec in specs:
            lines: list[str] = []
            if spec.type is _HISTOGRAM:
                edges = _edge_texts(spec.buckets)
                for extra, hist in histograms.get(spec.key, ()):
                    pairs = self._label_texts(spec, extra)
                    labels = ",".join([text for _, text in pairs])
                    # Labels in sorted order with `le` among them, as prometheus_client writes.
                    before = "".join([text + "," for name, text in pairs if name < "le"])
                    after = "".join(["," + text for name, text in pairs if name > "le"])
                    head, tail = f"{spec.name}_bucket{{{before}le=\"", f"\"{after}}} "
                    exemplars = hist.exemplars
                    cumulative = 0
                    for k, (edge, count) in enumerate(zip(edges, hist.counts, strict=True)):
                        cumulative += count
                        line = head + edge + tail + _count(cumulative)
                        if openmetrics and exemplars is not None and (
                                exemplar := exemplars[k]) is not None:
                            ident, value, stamp = exemplar
                            line += f' # {{response_id="{_escape(ident)}"}} {fmt(value)} {stamp}'
                        lines.append(line)
                    lines.append(f"{spec.name}_count{{{labels}}} {_count(cumulative)}")
                    lines.append(f"{spec.name}_sum{{{labels}}} {fmt(hist.total)}")
            else:
                name = spec.name + "_total" if spec.type is _COUNTER else spec.name
                for extra, value in scalars.get(spec.key, ()):
                    labels = ",".join([text for _, text in self._label_texts(spec, extra)])
                    lines.append(f"{name}{{{labels}}} {fmt(value)}")
            out.append(("\n".join(lines) + "\n").encode() if lines else b"")
        return tuple(out)


def _proto_exemplars(exemplars: list[ExemplarValue | None] | None) -> list[bytes | None]:
    """Encoded exemplars per bucket ([] when there are none)."""
    if not exemplars or not any(exemplars):
        return []
    return [None if e is None else _proto_exemplar(*e) for e in exemplars]


def _proto_exemplar(ident: str, value: float, stamp: float) -> bytes:
    return protobuf.exemplar((("response_id", ident),), value, stamp)


@functools.lru_cache(maxsize=4096)
def _proto_pair(name: str, value: str) -> bytes:
    """One encoded label pair of an extra label (a few fixed values per family)."""
    return protobuf.labels(((name, value),))


@functools.cache
def _edge_texts(edges: tuple[float, ...]) -> tuple[str, ...]:
    return (*map(floatToGoString, edges), "+Inf")


@functools.cache
def _classic_buckets(edges: tuple[float, ...]) -> protobuf.ClassicBuckets:
    return protobuf.ClassicBuckets(edges)


class ProbeCollector:
    """The probe families of every series: a collector with a fast, incremental renderer."""

    def __init__(self, families: Iterable[FamilySpec],
                 native: NativeSettings = DEFAULT_NATIVE,
                 clock: Callable[[], float] = time.monotonic, refresh: bool = True) -> None:
        self.families = {f.key: f for f in families}
        self._specs = tuple(self.families.values())
        self.native = native
        self.series: dict[SeriesKey, SeriesValues] = {}
        self._layout = Layout()
        self._clock = clock
        self._rendered_at: dict[Format, float] = {}  # the formats being scraped
        self._gaps: dict[Format, float] = {}
        self._refresh = refresh
        self._refresher: threading.Thread | None = None
        self._refresher_lock = threading.Lock()

    def add(self, key: SeriesKey, labels: Sequence[tuple[str, str]]) -> SeriesValues:
        """Register a series with its label pairs."""
        values = self.series[key] = SeriesValues(labels, self.families, self.native,
                                                 self._layout)
        return values

    def remove(self, key: SeriesKey) -> None:
        """Forget a series."""
        self.series.pop(key, None)

    def _rendering(self, fmt: Format) -> list[tuple[bytes, ...]]:
        """Every series' pieces in one format (a render: the format is being scraped)."""
        now = self._clock()
        last = self._rendered_at.get(fmt)
        if last is not None:
            self._gaps[fmt] = now - last
        self._rendered_at[fmt] = now
        self._drop_idle(now)
        if self._refresh:
            self._start_refresher()
        specs = self._specs
        return [s.rendered(fmt, specs) for s in list(self.series.values())]

    def _drop_idle(self, now: float) -> None:
        """Drop the caches of the formats that are not scraped any more."""
        for fmt, at in list(self._rendered_at.items()):
            if now - at > max(CACHE_IDLE, IDLE_GAPS * self._gaps.get(fmt, 0.0)):
                self._rendered_at.pop(fmt, None)
                self._gaps.pop(fmt, None)
                for series in list(self.series.values()):
                    series.forget(fmt)

    def _start_refresher(self) -> None:
        with self._refresher_lock:
            if self._refresher is None:
                self._refresher = threading.Thread(target=self._refresh_caches, daemon=True,
                                                   name="metrics-refresh")
                self._refresher.start()

    def _refresh_caches(self) -> None:
        """Re-render changed series into the caches of the scraped formats, until none is."""
        while True:
            gap = min(list(self._gaps.values()), default=REFRESH_MAX * 10)
            time.sleep(min(max(gap / 10, REFRESH_MIN), REFRESH_MAX))
            self._drop_idle(self._clock())
            with self._refresher_lock:
                formats = list(self._rendered_at)
                if not formats:
                    self._refresher = None
                    return
            for fmt in formats:
                for series in list(self.series.values()):
                    if fmt not in self._rendered_at:  # dropped meanwhile: keep it dropped
                        break
                    series.rendered(fmt, self._specs)

    def text_chunks(self, openmetrics: bool = False) -> list[bytes]:
        """The exposition text of every probe family (without OpenMetrics' `# EOF`), in
        pieces to join or write one after another."""
        per_series = self._rendering(Format.OPENMETRICS if openmetrics else Format.TEXT)
        out: list[bytes] = []
        for i, spec in enumerate(self._specs):
            name = spec.name if openmetrics or spec.type is not _COUNTER else spec.name + "_total"
            out.append(f"# HELP {name} {spec.help}\n# TYPE {name} {spec.type}\n".encode())
            out.extend([piece for pieces in per_series if (piece := pieces[i])])
        return out

    def protobuf_chunks(self, classic: bool = True) -> list[bytes]:
        """Every probe family that has children as delimited protobuf (classic buckets
        optional), in pieces to join or write one after another."""
        per_series = self._rendering(Format.PROTOBUF if classic else Format.PROTOBUF_NATIVE)
        out: list[bytes] = []
        for i, spec in enumerate(self._specs):
            records = [piece for pieces in per_series if (piece := pieces[i])]
            if records:  # an empty MetricFamily is not valid exposition
                name = spec.name + "_total" if spec.type is _COUNTER else spec.name
                out.append(protobuf.family_header(name, spec.help, _PROTO_TYPES[spec.type],
                                                  sum(map(len, records))))
                out.extend(records)
        return out

    def render(self, openmetrics: bool = False) -> bytes:
        """The exposition text of every probe family (without OpenMetrics' `# EOF`)."""
        return b"".join(self.text_chunks(openmetrics))

    def render_protobuf(self, classic: bool = True) -> bytes:
        """The delimited protobuf of every probe family that has children (classic optional)."""
        return b"".join(self.protobuf_chunks(classic))

    def describe(self) -> list[Metric]:
        """The families this collector serves (empty), so a registry can find them by name."""
        return [_empty(spec) for spec in self.families.values()]

    def collect(self, names: frozenset[str] | None = None) -> Iterator[Metric]:
        """Standard metric families for prometheus_client's own renderers and tests; with
        `names`, only the families that serve one of those sample names."""
        series = list(self.series.values())
        for spec in self.families.values():
            if names is None or not names.isdisjoint(spec.sample_names):
                yield self._family(spec, series)

    def _family(self, spec: FamilySpec, series: Sequence[SeriesValues]) -> Metric:
        base = [k for k, _ in (series[0].label_items if series else ())]
        names = [*base, *spec.labels] if spec.info else [*base, spec.label] if spec.label else base
        if spec.type is _HISTOGRAM:
            family: Metric = HistogramMetricFamily(spec.name, spec.help, labels=names)
        elif spec.type is _COUNTER:
            family = CounterMetricFamily(spec.name, spec.help, labels=names)
        else:
            family = GaugeMetricFamily(spec.name, spec.help, labels=names)
        edges = _edge_texts(spec.buckets)
        for s in series:
            values = [v for _, v in s.label_items]
            if spec.type is _HISTOGRAM:
                for (family_key, extra), hist in s.histogram_items():
                    if family_key is not spec.key:
                        continue
                    buckets, cumulative = [], 0
                    exemplars = hist.exemplars or [None] * len(hist.counts)
                    for edge, count, exemplar in zip(edges, hist.counts, exemplars, strict=True):
                        cumulative += count
                        ex = (Exemplar({"response_id": exemplar[0]}, exemplar[1], exemplar[2])
                              if exemplar else None)
                        buckets.append((edge, float(cumulative), ex) if ex else
                                       (edge, float(cumulative)))
                    labels = [*values, extra] if spec.label else values
                    family.add_metric(labels, buckets, hist.total)
            else:
                for (family_key, extra), value in s.scalar_items():
                    if family_key is not spec.key:
                        continue
                    if spec.info:
                        info = dict(s._info.get(spec.key, ()))
                        family.add_metric([*values, *(info.get(n, "") for n in spec.labels)],
                                          value)
                    else:
                        family.add_metric([*values, extra] if spec.label else values, value)
        return family


def blocks(chunks: Iterable[bytes], size: int = BLOCK_SIZE) -> Iterator[bytes]:
    """The pieces of a page joined into blocks of about `size` bytes, one block at a time.

    A 5,000-series page is ~20 MB in ~70,000 pieces: joined at once, it is one more copy of the
    page in memory and one C call that holds the GIL for ~20 ms (the probing loop waits that
    long); block by block, neither.
    """
    group: list[bytes] = []
    filled = 0
    for chunk in chunks:
        group.append(chunk)
        filled += len(chunk)
        if filled >= size:
            yield b"".join(group)
            group, filled = [], 0
    if group:
        yield b"".join(group)


def _empty(spec: FamilySpec) -> Metric:
    """A family without samples: what `describe()` reports."""
    if spec.type is _HISTOGRAM:
        return HistogramMetricFamily(spec.name, spec.help)
    if spec.type is _COUNTER:
        return CounterMetricFamily(spec.name, spec.help)
    return GaugeMetricFamily(spec.name, spec.help)


def is_finite(value: float) -> bool:
    """Whether a value can be observed (NaN and infinities are dropped)."""
    return not (math.isnan(value) or math.isinf(value))

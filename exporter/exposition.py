"""Per-series probe metrics with an incremental renderer.

With thousands of series the probe families dominate the page (~200 lines per series), and
prometheus_client's generic renderer takes ~10 µs a line: 5,000 series would cost ~10 s per
scrape. Here each series keeps its values in plain lists and its rendered lines in a cache that
is rebuilt only after that series recorded something, so a scrape mostly joins cached text.

`ProbeCollector` is also a regular prometheus_client collector: `collect()` yields standard
metric families, so `registry.get_sample_value`, `name[]` filtering and the library's own
renderers see exactly the same values (a test compares both renderings line by line).

Every histogram child also keeps native (exponential) buckets, filled at record time, for the
protobuf exposition (`render_protobuf`), which is cached per series the same way.

Threads. Only the probing event loop writes values (`create`, `remove`, `observe`, `inc`,
`set`); renders run in worker threads while it does, without a lock and without copying the
whole state first. What makes that safe under CPython's GIL:
- a render takes each container's items in one C-level call (`list(d.items())`,
  `list.copy()`), which no other thread interrupts; no container changes size while it is
  iterated, and a child removed meanwhile is simply rendered one last time;
- counts are ints and floats read one at a time: a text render that overlaps an observation
  may include it in some buckets and not in others, but computes `_count` from the same pass
  as `+Inf`, so every page is a valid histogram (monotonic buckets, `_count` = `+Inf`); the
  observation shows fully on the next scrape;
- protobuf (native histograms must agree exactly with their count) copies a histogram only
  between two observations (`_Histogram.writing`, a sequence counter);
- the version is read before rendering and a cache entry is stored under it, so a write during
  a render leaves the entry stale and the next scrape renders again;
- render threads write only caches (one dict item per format and family), each a single
  atomic assignment.
A test renders in threads while the loop records and checks every page.
"""

from __future__ import annotations

import bisect
import functools
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from exporter import protobuf
from exporter.families import Family, FamilySpec, MetricType
from exporter.nativehist import NativeBuckets

_COUNT_TEXT = [floatToGoString(float(i)) for i in range(4096)]


def _count(value: int) -> str:
    """floatToGoString for a bucket count, from a table for the common small values."""
    return _COUNT_TEXT[value] if value < 4096 else floatToGoString(value)


_PROTO_TYPES = {MetricType.COUNTER: protobuf.MetricType.COUNTER,
                MetricType.GAUGE: protobuf.MetricType.GAUGE,
                MetricType.HISTOGRAM: protobuf.MetricType.HISTOGRAM}
_HISTOGRAM, _COUNTER = MetricType.HISTOGRAM, MetricType.COUNTER
Child = tuple[Family, str | None]  # a family and the value of its extra label


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
    counts: list[int]  # per bucket (not cumulative); the last is +Inf
    native: NativeBuckets
    total: float = 0.0
    exemplars: list[tuple[str, float, float] | None] = field(default_factory=list)
    # Odd while an observation is half written. Renders run in a worker thread and the
    # protobuf page must not show a count that disagrees with its buckets (Prometheus rejects
    # such a native histogram), so they copy a histogram only while this is even and unchanged.
    writing: int = 0

    def snapshot(self) -> tuple[list[int], float, NativeBuckets,
                                list[tuple[str, float, float] | None]]:
        """Counts, sum, native buckets and exemplars from one moment (call off the loop)."""
        while True:
            mark = self.writing
            if not mark & 1:
                copy = (self.counts.copy(), self.total, self.native.snapshot(),
                        self.exemplars.copy())
                if self.writing == mark:
                    return copy
            time.sleep(0)  # let the loop finish that observation


class SeriesValues:
    """The values of one probe series and its cached rendering."""

    __slots__ = ("_cache", "_families", "_native", "_prefix_cache", "_proto_exemplar_cache",
                 "_proto_labels", "histograms", "label_items", "scalars", "version")

    def __init__(self, label_items: Sequence[tuple[str, str]],
                 families: dict[Family, FamilySpec], native: NativeSettings = DEFAULT_NATIVE
                 ) -> None:
        self.label_items = tuple(label_items)
        self._families = families
        self._native = native
        self.histograms: dict[Child, _Histogram] = {}
        self.scalars: dict[Child, float] = {}
        self.version = 0
        self._cache: dict[tuple[str, Family], tuple[int, bytes]] = {}
        self._prefix_cache: dict[Child, tuple[str, ...]] = {}
        self._proto_labels: dict[Child, bytes] = {}
        self._proto_exemplar_cache: dict[Child, dict[tuple[str, float, float], bytes]] = {}

    def create(self, family: Family, extra: str | None = None) -> None:
        """Make a child exist (value 0) before anything is recorded."""
        spec = self._families[family]
        if spec.type is _HISTOGRAM:
            if (family, extra) in self.histograms:
                return
            n = len(spec.buckets) + 1
            native = NativeBuckets(self._native.schema, self._native.max_buckets)
            self.histograms[(family, extra)] = _Histogram([0] * n, native, 0.0, [None] * n)
        elif (family, extra) in self.scalars:
            return
        else:
            self.scalars[(family, extra)] = 0.0
        self.version += 1

    def remove(self, family: Family, extra: str | None = None) -> None:
        """Drop a child."""
        self.histograms.pop((family, extra), None)
        self.scalars.pop((family, extra), None)
        self.version += 1

    def observe(self, family: Family, value: float, extra: str | None = None,
                exemplar: str | None = None) -> None:
        """Add one observation to a histogram child."""
        spec = self._families[family]
        hist = self.histograms[(family, extra)]
        index = bisect.bisect_left(spec.buckets, value)
        hist.writing += 1
        hist.counts[index] += 1
        hist.native.observe(value)
        hist.total += value
        if exemplar is not None:
            hist.exemplars[index] = (exemplar, value, time.time())
        hist.writing += 1
        self.version += 1

    def observe_many(self, family: Family, values: Iterable[float],
                     extra: str | None = None) -> None:
        """Add several observations (without exemplars) to a histogram child at once."""
        edges = self._families[family].buckets
        hist = self.histograms[(family, extra)]
        counts, native, find = hist.counts, hist.native, bisect.bisect_left
        hist.writing += 1
        for value in values:
            counts[find(edges, value)] += 1
            native.observe(value)
            hist.total += value
        hist.writing += 1
        self.version += 1

    def inc(self, family: Family, amount: float = 1.0, extra: str | None = None) -> None:
        """Increase a counter child (created when the series was)."""
        self.scalars[(family, extra)] += amount
        self.version += 1

    def set(self, family: Family, value: float, extra: str | None = None) -> None:
        """Set a gauge child (creating it if needed)."""
        self.scalars[(family, extra)] = value
        self.version += 1

    def get(self, family: Family, extra: str | None = None) -> float | None:
        """A scalar child's value."""
        return self.scalars.get((family, extra))

    # -- rendering ------------------------------------------------------------------------

    def render(self, spec: FamilySpec, openmetrics: bool) -> bytes:
        """This series' lines of one family, from the cache unless something changed."""
        key = ("openmetrics" if openmetrics else "text", spec.key)
        cached = self._cache.get(key)
        version = self.version
        if cached is not None and cached[0] == version:
            return cached[1]
        text = self._render(spec, openmetrics).encode()
        self._cache[key] = (version, text)
        return text

    def render_protobuf(self, spec: FamilySpec, classic: bool = True) -> bytes:
        """This series' metric records of one family (protobuf), cached like `render`."""
        key = ("protobuf" if classic else "protobuf-native", spec.key)
        cached = self._cache.get(key)
        version = self.version
        if cached is not None and cached[0] == version:
            return cached[1]
        records = self._render_protobuf(spec, classic)
        self._cache[key] = (version, records)
        return records

    def _render_protobuf(self, spec: FamilySpec, classic: bool) -> bytes:
        records: list[bytes] = []
        if spec.type is _HISTOGRAM:
            layout = _classic_buckets(spec.buckets) if classic else None
            for (family, extra), hist in list(self.histograms.items()):
                if family is not spec.key:
                    continue
                counts, total, native, exemplars = hist.snapshot()
                examples = self._proto_exemplars(family, extra, exemplars)
                records.append(protobuf.histogram(
                    self._proto_label_fields(spec, extra), sum(counts), total,
                    classic=layout, counts=counts, exemplars=examples if classic else (),
                    native=native,
                    native_exemplars=() if classic else [e for e in examples if e is not None]))
        else:
            encode = protobuf.counter if spec.type is _COUNTER else protobuf.gauge
            for (family, extra), value in list(self.scalars.items()):
                if family is spec.key:
                    records.append(encode(self._proto_label_fields(spec, extra), value))
        return b"".join(records)

    def _proto_exemplars(self, family: Family, extra: str | None,
                         exemplars: list[tuple[str, float, float] | None]) -> list[bytes | None]:
        """Encoded exemplars per bucket, reusing last render's encoding of unchanged ones."""
        if not any(exemplars):
            return []
        previous = self._proto_exemplar_cache.get((family, extra), {})
        current = {e: previous.get(e) or protobuf.exemplar((("response_id", e[0]),), e[1], e[2])
                   for e in exemplars if e is not None}
        self._proto_exemplar_cache[(family, extra)] = current
        return [None if e is None else current[e] for e in exemplars]

    def _proto_label_fields(self, spec: FamilySpec, extra: str | None) -> bytes:
        """A child's encoded label pairs; labels never change, so built once."""
        key = (spec.key, extra)
        fields = self._proto_labels.get(key)
        if fields is None:
            fields = self._proto_labels[key] = protobuf.labels(self._items(spec, extra))
        return fields

    def _items(self, spec: FamilySpec, extra: str | None) -> list[tuple[str, str]]:
        if extra is None or spec.label is None:
            return sorted(self.label_items)
        return sorted((*self.label_items, (spec.label, extra)))

    def _prefixes(self, spec: FamilySpec, extra: str | None) -> tuple[str, ...]:
        """Everything of each line but the value; labels never change, so built once."""
        key = (spec.key, extra)
        cached = self._prefix_cache.get(key)
        if cached is not None:
            return cached
        items = self._items(spec, extra)
        labels = ",".join(f'{k}="{_escape(v)}"' for k, v in items)
        if spec.type is _HISTOGRAM:
            # Labels in sorted order with `le` among them, as prometheus_client writes them.
            before = "".join(f'{k}="{_escape(v)}",' for k, v in items if k < "le")
            after = "".join(f',{k}="{_escape(v)}"' for k, v in items if k > "le")
            edges = [*map(floatToGoString, spec.buckets), "+Inf"]
            prefixes = (*(f'{spec.name}_bucket{{{before}le="{edge}"{after}}} ' for edge in edges),
                        f"{spec.name}_count{{{labels}}} ", f"{spec.name}_sum{{{labels}}} ")
        else:
            suffix = "_total" if spec.type is _COUNTER else ""
            prefixes = (f"{spec.name}{suffix}{{{labels}}} ",)
        self._prefix_cache[key] = prefixes
        return prefixes

    def _render(self, spec: FamilySpec, openmetrics: bool) -> str:
        lines: list[str] = []
        fmt = floatToGoString
        if spec.type is _HISTOGRAM:
            for (family, extra), hist in list(self.histograms.items()):
                if family is not spec.key:
                    continue
                prefixes = self._prefixes(spec, extra)
                cumulative = 0
                for prefix, count, exemplar in zip(prefixes, hist.counts, hist.exemplars,
                                                   strict=False):
                    cumulative += count
                    line = prefix + _count(cumulative)
                    if openmetrics and exemplar is not None:
                        ident, value, stamp = exemplar
                        line += f' # {{response_id="{_escape(ident)}"}} {fmt(value)} {stamp}'
                    lines.append(line)
                lines.append(prefixes[-2] + _count(cumulative))
                lines.append(prefixes[-1] + fmt(hist.total))
        else:
            for (family, extra), value in list(self.scalars.items()):
                if family is spec.key:
                    lines.append(self._prefixes(spec, extra)[0] + fmt(value))
        return "\n".join(lines) + "\n" if lines else ""


@functools.cache
def _classic_buckets(edges: tuple[float, ...]) -> protobuf.ClassicBuckets:
    return protobuf.ClassicBuckets(edges)


class ProbeCollector:
    """The probe families of every series: a collector with a fast, incremental renderer."""

    def __init__(self, families: Iterable[FamilySpec],
                 native: NativeSettings = DEFAULT_NATIVE) -> None:
        self.families = {f.key: f for f in families}
        self.native = native
        self.series: dict[tuple[str, str, str], SeriesValues] = {}

    def add(self, key: tuple[str, str, str], labels: Sequence[tuple[str, str]]) -> SeriesValues:
        """Register a series with its label pairs."""
        values = self.series[key] = SeriesValues(labels, self.families, self.native)
        return values

    def remove(self, key: tuple[str, str, str]) -> None:
        """Forget a series."""
        self.series.pop(key, None)

    def render(self, openmetrics: bool = False) -> bytes:
        """The exposition text of every probe family (without OpenMetrics' `# EOF`)."""
        out: list[bytes] = []
        series = list(self.series.values())
        for spec in self.families.values():
            name = spec.name if openmetrics or spec.type is not _COUNTER else spec.name + "_total"
            out.append(f"# HELP {name} {spec.help}\n# TYPE {name} {spec.type}\n".encode())
            out.extend(s.render(spec, openmetrics) for s in series)
        return b"".join(out)

    def render_protobuf(self, classic: bool = True) -> bytes:
        """The delimited protobuf of every probe family that has children (classic optional)."""
        out: list[bytes] = []
        series = list(self.series.values())
        for spec in self.families.values():
            records = b"".join([s.render_protobuf(spec, classic) for s in series])
            if records:  # an empty MetricFamily is not valid exposition
                name = spec.name + "_total" if spec.type is _COUNTER else spec.name
                out.append(protobuf.family(name, spec.help, _PROTO_TYPES[spec.type], (records,)))
        return b"".join(out)

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
        names = [*base, spec.label] if spec.label else base
        if spec.type is _HISTOGRAM:
            family: Metric = HistogramMetricFamily(spec.name, spec.help, labels=names)
        elif spec.type is _COUNTER:
            family = CounterMetricFamily(spec.name, spec.help, labels=names)
        else:
            family = GaugeMetricFamily(spec.name, spec.help, labels=names)
        edges = [*map(floatToGoString, spec.buckets), "+Inf"]
        for s in series:
            values = [v for _, v in s.label_items]
            if spec.type is _HISTOGRAM:
                for (family_key, extra), hist in list(s.histograms.items()):
                    if family_key is not spec.key:
                        continue
                    buckets, cumulative = [], 0
                    for edge, count, exemplar in zip(edges, hist.counts, hist.exemplars,
                                                     strict=True):
                        cumulative += count
                        ex = (Exemplar({"response_id": exemplar[0]}, exemplar[1], exemplar[2])
                              if exemplar else None)
                        buckets.append((edge, float(cumulative), ex) if ex else
                                       (edge, float(cumulative)))
                    labels = [*values, extra] if spec.label else values
                    family.add_metric(labels, buckets, hist.total)
            else:
                for (family_key, extra), value in list(s.scalars.items()):
                    if family_key is spec.key:
                        family.add_metric([*values, extra] if spec.label else values, value)
        return family


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

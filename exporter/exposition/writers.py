"""One walk over a series' values, and the writers it feeds: Prometheus text, OpenMetrics,
protobuf, and prometheus_client's own families.

`walk` visits the children of one series family by family, in the collector's order, and hands
each to a writer (`begin` a family, then `histogram` or `scalar` per child, `end` the family).
The format writers return the family's bytes for this series, which `rendered` caches per
format; `ClientWriter` fills standard metric families for the library's renderers and tests.
Page headers (`# HELP`/`# TYPE`, a MetricFamily's length and name) are written once per page by
the collector with `text_header` and `protobuf_header`.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar, cast

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString as _float_to_go_string

from exporter.exposition import protobuf
from exporter.exposition.families import FamilySpec, MetricType
from exporter.exposition.nativehist import NativeBuckets, zeros
from exporter.exposition.store import ExemplarValue, Format, Histogram, SeriesValues

# Unannotated upstream: a number as Go writes it ("+Inf", "1e+06").
floatToGoString: Callable[[float], str] = _float_to_go_string
T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")
_HISTOGRAM, _COUNTER = MetricType.HISTOGRAM, MetricType.COUNTER
_PROTO_TYPES = {MetricType.COUNTER: protobuf.MetricType.COUNTER,
                MetricType.GAUGE: protobuf.MetricType.GAUGE,
                MetricType.HISTOGRAM: protobuf.MetricType.HISTOGRAM}
_COUNT_TEXT = [floatToGoString(float(i)) for i in range(4096)]


class Writer(Protocol[T_co]):
    """What `walk` feeds: one family at a time, its children in order."""

    def begin(self, spec: FamilySpec) -> None:
        """A family starts."""

    def histogram(self, extra: str | None, hist: Histogram) -> None:
        """One histogram child (`extra`: the value of the family's extra label)."""

    def scalar(self, extra: str | None, value: float) -> None:
        """One counter or gauge child."""

    def end(self) -> T_co:
        """The family ends: what the writer made of it."""
        ...


def walk(values: SeriesValues, specs: Sequence[FamilySpec], writer: Writer[T],
         empty: T) -> list[T]:
    """Feed every child of one series to a writer, family by family in `specs` order; a
    family the series has no child of is `empty` without asking the writer."""
    histograms, scalars = values.by_family()
    out = []
    for spec in specs:
        if spec.type is _HISTOGRAM:
            children = histograms.get(spec.key)
            if children is None:
                out.append(empty)
                continue
            writer.begin(spec)
            for extra, hist in children:
                writer.histogram(extra, hist)
        else:
            values_ = scalars.get(spec.key)
            if values_ is None:
                out.append(empty)
                continue
            writer.begin(spec)
            for extra, value in values_:
                writer.scalar(extra, value)
        out.append(writer.end())
    return out


def rendered(values: SeriesValues, fmt: Format, specs: Sequence[FamilySpec]
             ) -> tuple[bytes, ...]:
    """A series' bytes of every family in `specs` (the collector's, in its order) in one
    format, from its cache unless the series changed since the entry was made."""
    cache = values.cache
    version = values.version
    if cache is None:
        cache = values.cache = [None] * len(Format)
    else:
        entry = cache[fmt]
        if entry is not None and entry[0] == version:
            return entry[1]
    writer: Writer[bytes] = (TextWriter(values, fmt is Format.OPENMETRICS) if fmt.is_text
                             else ProtobufWriter(values, fmt is Format.PROTOBUF))
    pieces = tuple(walk(values, specs, writer, b""))
    cache[fmt] = (version, pieces)
    return pieces


# -- Prometheus text and OpenMetrics -------------------------------------------------------------

def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _count(value: int) -> str:
    """floatToGoString for a bucket count, from a table for the common small values."""
    return _COUNT_TEXT[value] if value < 4096 else floatToGoString(value)


@functools.cache
def _edge_texts(edges: tuple[float, ...]) -> tuple[str, ...]:
    return (*map(floatToGoString, edges), "+Inf")


def text_header(spec: FamilySpec, openmetrics: bool) -> bytes:
    """A family's `# HELP` and `# TYPE` lines."""
    name = spec.name if openmetrics or spec.type is not _COUNTER else spec.name + "_total"
    return f"# HELP {name} {spec.help}\n# TYPE {name} {spec.type}\n".encode()


class TextWriter:
    """The sample lines of one series, as prometheus_client writes them (labels sorted)."""

    __slots__ = ("_edges", "_lines", "_name", "_openmetrics", "_pairs", "_spec", "_values")

    def __init__(self, values: SeriesValues, openmetrics: bool) -> None:
        self._values = values
        pairs = values.text_labels
        if pairs is None:
            pairs = values.text_labels = tuple(
                (name, f'{name}="{_escape(value)}"') for name, value in sorted(values.label_items))
        self._pairs: tuple[tuple[str, str], ...] = pairs
        self._openmetrics = openmetrics
        self._lines: list[str] = []

    def begin(self, spec: FamilySpec) -> None:
        """A family starts."""
        self._spec = spec
        self._lines = []
        if spec.type is _HISTOGRAM:
            self._edges = _edge_texts(spec.buckets)
        else:
            self._name = spec.name + "_total" if spec.type is _COUNTER else spec.name

    def _label_texts(self, extra: str | None) -> list[tuple[str, str]]:
        """A child's `name="value"` pairs, sorted by name."""
        label = self._spec.label
        if self._spec.info:  # the child's own labels, set per series
            return sorted([*self._pairs, *((name, f'{name}="{_escape(value)}"') for name, value
                                           in self._values.info(self._spec.key) or ())])
        if extra is None or label is None:
            return list(self._pairs)
        return sorted([*self._pairs, (label, f'{label}="{_escape(extra)}"')])

    def histogram(self, extra: str | None, hist: Histogram) -> None:
        """Bucket lines (with exemplars in OpenMetrics), `_count` and `_sum`."""
        name, lines, fmt = self._spec.name, self._lines, floatToGoString
        pairs = self._label_texts(extra)
        labels = ",".join([text for _, text in pairs])
        # Labels in sorted order with `le` among them, as prometheus_client writes.
        before = "".join([text + "," for name_, text in pairs if name_ < "le"])
        after = "".join(["," + text for name_, text in pairs if name_ > "le"])
        head, tail = f"{name}_bucket{{{before}le=\"", f"\"{after}}} "
        exemplars = hist.exemplars if self._openmetrics else None
        cumulative = 0
        for k, (edge, count) in enumerate(zip(self._edges, hist.counts, strict=True)):
            cumulative += count
            line = head + edge + tail + _count(cumulative)
            if exemplars is not None and (exemplar := exemplars[k]) is not None:
                ident, value, stamp = exemplar
                line += f' # {{response_id="{_escape(ident)}"}} {fmt(value)} {stamp}'
            lines.append(line)
        lines.append(f"{name}_count{{{labels}}} {_count(cumulative)}")
        lines.append(f"{name}_sum{{{labels}}} {fmt(hist.total)}")

    def scalar(self, extra: str | None, value: float) -> None:
        """One sample line."""
        labels = ",".join([text for _, text in self._label_texts(extra)])
        self._lines.append(f"{self._name}{{{labels}}} {floatToGoString(value)}")

    def end(self) -> bytes:
        """The family's lines of this series."""
        lines = self._lines
        return ("\n".join(lines) + "\n").encode() if lines else b""


# -- protobuf --------------------------------------------------------------------------------------

def protobuf_header(spec: FamilySpec, records_size: int) -> bytes:
    """A MetricFamily's length prefix and header, for records of `records_size` bytes."""
    name = spec.name + "_total" if spec.type is _COUNTER else spec.name
    return protobuf.family_header(name, spec.help, _PROTO_TYPES[spec.type], records_size)


def _proto_exemplars(exemplars: list[ExemplarValue | None] | None) -> list[bytes | None]:
    """Encoded exemplars per bucket ([] when there are none)."""
    if not exemplars or not any(exemplars):
        return []
    return [None if e is None else _proto_exemplar(*e) for e in exemplars]


def _proto_exemplar(ident: str, value: float, stamp: float) -> bytes:
    return protobuf.exemplar((("response_id", ident),), value, stamp)


@functools.lru_cache(maxsize=4096)
def _proto_pair(name: str, value: str) -> bytes:
    """One encoded label pair (a few values per label: thousands of series share them)."""
    return protobuf.labels(((name, value),))


@functools.cache
def _classic_buckets(edges: tuple[float, ...]) -> protobuf.ClassicBuckets:
    return protobuf.ClassicBuckets(edges)


@functools.lru_cache(maxsize=256)
def _empty_body(classic: protobuf.ClassicBuckets | None, buckets: int, schema: int,
                max_buckets: int) -> bytes:
    """The Histogram fields of a child that was never observed (most children at start)."""
    return protobuf.histogram_body(0, 0.0, classic=classic, counts=zeros(buckets),
                                   native=NativeBuckets(schema, max_buckets))


class ProtobufWriter:
    """The Metric records of one series; histograms native, classic buckets optional."""

    __slots__ = ("_after", "_before", "_classic", "_info", "_keep_classic", "_label", "_names",
                 "_pairs", "_records", "_scalar", "_splits", "_values")

    def __init__(self, values: SeriesValues, classic: bool) -> None:
        self._values = values
        pairs = values.proto_labels
        if pairs is None:
            pairs = values.proto_labels = tuple(
                (name, _proto_pair(name, value)) for name, value in sorted(values.label_items))
        self._pairs: tuple[tuple[str, bytes], ...] = pairs
        self._names = [name for name, _ in pairs]
        self._keep_classic = classic
        self._records: list[bytes] = []
        self._splits: dict[str | None, tuple[bytes, bytes]] = {}

    def begin(self, spec: FamilySpec) -> None:
        """A family starts: its label pairs split where the extra label goes."""
        self._records = []
        self._info = spec.key if spec.info else None
        label = self._label = spec.label
        split = self._splits.get(label)
        if split is None:
            # Label pairs sorted by name, as Prometheus writes them: the extra label's pair
            # goes between these two runs (a few distinct extra labels per series).
            pairs = self._pairs
            at = len(pairs) if label is None else bisect.bisect_left(self._names, label)
            split = self._splits[label] = (b"".join([encoded for _, encoded in pairs[:at]]),
                                           b"".join([encoded for _, encoded in pairs[at:]]))
        self._before, self._after = split
        if spec.type is _HISTOGRAM:
            self._classic = _classic_buckets(spec.buckets) if self._keep_classic else None
        else:
            self._scalar = protobuf.counter if spec.type is _COUNTER else protobuf.gauge

    def _labels(self, extra: str | None) -> bytes:
        if self._info is not None:  # an info family: the child's own labels, set per series
            return protobuf.labels(tuple(sorted(
                (*self._values.label_items, *(self._values.info(self._info) or ())))))
        if extra is None or self._label is None:
            return self._before + self._after
        return self._before + _proto_pair(self._label, extra) + self._after

    def histogram(self, extra: str | None, hist: Histogram) -> None:
        """One histogram record, of values from between two observations."""
        labels, layout = self._labels(extra), self._classic
        if not hist.writing:  # never observed: the body every empty child of the family has
            self._records.append(protobuf.histogram_record(labels, _empty_body(
                layout, len(hist.counts), hist.native.schema, hist.native.max_buckets)))
            return

        def encode(counts: Sequence[int], total: float, native: NativeBuckets,
                   exemplars: list[ExemplarValue | None] | None) -> bytes:
            examples = _proto_exemplars(exemplars)
            return protobuf.histogram(
                labels, sum(counts), total, classic=layout, counts=counts,
                exemplars=examples if layout is not None else (), native=native,
                native_exemplars=() if layout is not None else
                [e for e in examples if e is not None])

        self._records.append(hist.consistent(encode))

    def scalar(self, extra: str | None, value: float) -> None:
        """One counter or gauge record."""
        self._records.append(self._scalar(self._labels(extra), value))

    def end(self) -> bytes:
        """The family's records of this series."""
        return b"".join(self._records)


# -- prometheus_client's families ----------------------------------------------------------------

def client_family(spec: FamilySpec, labels: Sequence[str] = ()) -> Metric:
    """An empty standard family of the spec's type."""
    if spec.type is _HISTOGRAM:
        return HistogramMetricFamily(spec.name, spec.help, labels=labels or None)
    if spec.type is _COUNTER:
        return CounterMetricFamily(spec.name, spec.help, labels=labels or None)
    return GaugeMetricFamily(spec.name, spec.help, labels=labels or None)


class ClientWriter:
    """Standard prometheus_client families, filled series by series (`series`, then `walk`)."""

    def __init__(self, specs: Sequence[FamilySpec], label_names: Sequence[str]) -> None:
        self._names = tuple(label_names)
        self.families = {spec.key: client_family(
            spec, [*label_names, *spec.labels] if spec.info
            else [*label_names, spec.label] if spec.label else list(label_names))
            for spec in specs}
        self._values: list[str] = []
        self._series: SeriesValues | None = None

    def series(self, values: SeriesValues) -> None:
        """The series whose children come next."""
        own = dict(values.label_items)
        self._values = [own.get(name, "") for name in self._names]
        self._series = values

    def begin(self, spec: FamilySpec) -> None:
        """A family starts."""
        self._spec = spec
        self._family = self.families[spec.key]

    def _labels(self, extra: str | None) -> list[str]:
        if self._spec.info and self._series is not None:
            info = dict(self._series.info(self._spec.key) or ())
            return [*self._values, *(info.get(name, "") for name in self._spec.labels)]
        return [*self._values, extra or ""] if self._spec.label else self._values

    def histogram(self, extra: str | None, hist: Histogram) -> None:
        """Cumulative buckets with their exemplars, and the sum."""
        buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
        cumulative = 0
        exemplars = hist.exemplars or [None] * len(hist.counts)
        for edge, count, exemplar in zip(_edge_texts(self._spec.buckets), hist.counts,
                                         exemplars, strict=True):
            cumulative += count
            buckets.append((edge, float(cumulative), Exemplar(
                {"response_id": exemplar[0]}, exemplar[1], exemplar[2])) if exemplar
                else (edge, float(cumulative)))
        # A histogram spec's family: client_family made a HistogramMetricFamily.
        family = cast(HistogramMetricFamily, self._family)
        family.add_metric(self._labels(extra), buckets, hist.total)

    def scalar(self, extra: str | None, value: float) -> None:
        """One sample."""
        # A counter or gauge spec's family (see client_family).
        family = cast("CounterMetricFamily | GaugeMetricFamily", self._family)
        family.add_metric(self._labels(extra), value)

    def end(self) -> None:
        """Nothing to hand back: the families fill up."""

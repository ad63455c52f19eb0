"""The Prometheus protobuf exposition: a small sans-IO encoder of `io.prometheus.client` messages.

`application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited`
is a stream of MetricFamily messages, each preceded by its length as a varint. Only what an
exporter writes is here — LabelPair, Gauge, Counter, Summary, Untyped, Histogram (classic and
native buckets), BucketSpan, Exemplar, Metric, MetricFamily — with the field numbers of
Prometheus' `metrics.proto`, in the proto3 wire form (fields at their default value are mostly
left out, repeated numbers packed). docs/metrics.md ("Native histograms and the protobuf
format") says why this is not the protobuf runtime.

Every function returns finished bytes so that callers can cache them: the label pairs of a
child, one `metric` record per child, and a family is a header followed by its records.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import accumulate

from prometheus_client.metrics_core import Metric as ClientFamily
from prometheus_client.samples import Exemplar as ClientExemplar

from exporter.exposition.nativehist import (
    DEFAULT_ZERO_THRESHOLD,
    MAX_SCHEMA,
    MIN_SCHEMA,
    NativeBuckets,
    spans_and_deltas,
)

CONTENT_TYPE = ("application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
                "encoding=delimited")


class MetricType(IntEnum):
    """MetricFamily.type."""

    COUNTER = 0
    GAUGE = 1
    SUMMARY = 2
    UNTYPED = 3
    HISTOGRAM = 4
    GAUGE_HISTOGRAM = 5


_double = struct.Struct("<d").pack
# The varints of 0…16383 (one or two bytes): counts, deltas, lengths and tags are mostly here.
_VARINTS = [bytes((n,)) if n < 128 else bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(16384)]
_SMALL = _VARINTS[:128]


def varint(n: int) -> bytes:
    """Base-128 varint of a non-negative int (a negative int64 as its two's complement)."""
    if 0 <= n < 16384:
        return _VARINTS[n]
    n &= 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zigzag(n: int) -> int:
    """sint32/sint64 mapping: 0, −1, 1, −2 … → 0, 1, 2, 3 …"""
    return (n << 1) ^ (n >> 63)


def _field(tag: int, body: bytes | bytearray) -> bytes:
    """A length-delimited field: tag byte(s), length, body."""
    return _SMALL[tag] + varint(len(body)) + body if tag < 128 else (
        varint(tag) + varint(len(body)) + body)


def _text(tag: int, value: str) -> bytes:
    return _field(tag, value.encode())


# Tags: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited).
_TAG_METRIC = 0x22  # MetricFamily.metric = 4
_TAG_BUCKET = 0x1A  # Histogram.bucket = 3 (sample_count = 1, sample_sum = 2)
_TAG_SCHEMA, _TAG_ZERO_THRESHOLD, _TAG_ZERO_COUNT = 0x28, 0x31, 0x38  # Histogram 5, 6, 7
_TAG_NEGATIVE_SPAN, _TAG_NEGATIVE_DELTA = 0x4A, 0x52  # Histogram 9, 10
_TAG_POSITIVE_SPAN, _TAG_POSITIVE_DELTA = 0x62, 0x6A  # Histogram 12, 13
_TAG_EXEMPLARS = (16 << 3) | 2  # Histogram 16, native-only exemplars
_TAG_UPPER_BOUND = 0x11  # Bucket.upper_bound = 2 (cumulative_count = 1, exemplar = 3)


@functools.lru_cache(maxsize=256)
def _label_name(name: str) -> bytes:
    """LabelPair.name, encoded (label names are few)."""
    return _text(0x0A, name)


def labels(items: Iterable[tuple[str, str]]) -> bytes:
    """The Metric.label fields of label pairs (give them sorted by name, as Prometheus does)."""
    out = []
    for name, value in items:
        raw = value.encode()
        pair = _label_name(name) + b"\x12" + varint(len(raw)) + raw
        out.append(b"\x0a" + varint(len(pair)) + pair)
    return b"".join(out)


def exemplar(items: Iterable[tuple[str, str]], value: float,
             timestamp: float | None = None) -> bytes:
    """An Exemplar message: label pairs, value, optional unix timestamp (seconds)."""
    body = labels(items) + b"\x11" + _double(value)
    if timestamp is not None:
        seconds = math.floor(timestamp)
        nanos = min(round((timestamp - seconds) * 1e9), 999_999_999)
        stamp = (b"\x08" + varint(seconds) if seconds else b"") + (
            b"\x10" + varint(nanos) if nanos else b"")
        body += b"\x1a" + _VARINTS[len(stamp)] + stamp
    return body


def _metric(label_fields: bytes, tag: int, body: bytes) -> bytes:
    """One Metric (labels + a value message) as a MetricFamily.metric record."""
    size = len(body)
    inner = label_fields + (bytes((tag, size)) if size < 128 else _SMALL[tag] + varint(size)
                            ) + body
    return b"\x22" + varint(len(inner)) + inner


# Metric.gauge / Metric.counter holding only a value (field 1, a double): tag, length 9, 0x09.
_GAUGE_VALUE, _COUNTER_VALUE = b"\x12\x09\x09", b"\x1a\x09\x09"
_GAUGE_ZERO, _COUNTER_ZERO = b"\x12\x00", b"\x1a\x00"


def gauge(label_fields: bytes, value: float) -> bytes:
    """A gauge child as a MetricFamily.metric record."""
    inner = label_fields + (_GAUGE_VALUE + _double(value) if value else _GAUGE_ZERO)
    size = len(inner)
    return b"\x22" + (_VARINTS[size] if size < 16384 else varint(size)) + inner


def counter(label_fields: bytes, value: float, exemplar_body: bytes | None = None) -> bytes:
    """A counter child as a MetricFamily.metric record."""
    if exemplar_body is None:
        inner = label_fields + (_COUNTER_VALUE + _double(value) if value else _COUNTER_ZERO)
        size = len(inner)
        return b"\x22" + (_VARINTS[size] if size < 16384 else varint(size)) + inner
    body = (b"\x09" + _double(value) if value else b"") + _field(0x12, exemplar_body)
    return _metric(label_fields, 0x1A, body)


def untyped(label_fields: bytes, value: float) -> bytes:
    """An untyped child as a MetricFamily.metric record."""
    return _metric(label_fields, 0x2A, b"\x09" + _double(value) if value else b"")


def summary(label_fields: bytes, count: int, total: float,
            quantiles: Sequence[tuple[float, float]] = ()) -> bytes:
    """A summary child as a MetricFamily.metric record."""
    body = (b"\x08" + varint(count) if count else b"") + (b"\x11" + _double(total) if total
                                                           else b"")
    body += b"".join(_field(0x1A, b"\x09" + _double(q) + b"\x11" + _double(v))
                     for q, v in quantiles)
    return _metric(label_fields, 0x22, body)


class ClassicBuckets:
    """How one family's classic buckets are encoded: its finite upper bounds, made once.

    Every bucket's cumulative count is written as a varint of the same width, as wide as the
    largest count needs (a longer-than-needed varint is valid protobuf). So a template of all
    buckets, made once per width, only needs its count bytes filled in, with slice assignments
    instead of a Python loop over the buckets.
    """

    __slots__ = ("_bounds", "_templates")

    def __init__(self, edges: Sequence[float]) -> None:
        self._bounds = tuple(bytes((_TAG_UPPER_BOUND,)) + _double(edge) for edge in edges)
        self._templates: dict[int, bytes] = {}

    def encode(self, counts: Sequence[int], exemplars: Sequence[bytes | None] = ()) -> bytes:
        """Histogram.bucket fields: `counts` per bucket with +Inf last (not cumulative).

        The +Inf bucket is left out unless it carries an exemplar (it equals the count), or is
        the only one (a histogram kept as sum and count): then it says the buckets are classic.
        """
        cumulative = list(accumulate(counts))
        if not self._bounds:
            example = exemplars[0] if exemplars else None
            return _field(_TAG_BUCKET, b"\x08" + varint(cumulative[-1]) + _INF_BOUND + (
                b"" if example is None else _field(0x1A, example)))
        finite = cumulative[:len(self._bounds)]
        width = max(1, ((finite[-1] if finite else 0).bit_length() + 6) // 7)
        stride = 12 + width  # bucket tag, length, count tag, count, bound tag, 8-byte bound
        data = bytearray(self._template(width))
        if width == 1:  # every count under 128 (most histograms): the counts are the bytes
            data[3::stride] = bytes(finite)
        else:
            for k in range(width):
                more = 0x80 if k < width - 1 else 0
                data[3 + k::stride] = bytes([((c >> 7 * k) & 0x7F) | more for c in finite])
        if not any(exemplars):
            return bytes(data)
        out: list[bytes | bytearray] = []
        start = 0
        for i, example in enumerate(exemplars[:len(finite)]):
            if example is not None:  # rewrite this bucket with its exemplar
                out.append(data[start:i * stride])
                out.append(_field(_TAG_BUCKET, data[i * stride + 2:(i + 1) * stride]
                                  + _field(0x1A, example)))
                start = (i + 1) * stride
        out.append(data[start:])
        last = exemplars[len(finite)] if len(exemplars) > len(finite) else None
        if last is not None:
            out.append(_field(_TAG_BUCKET, b"\x08" + varint(cumulative[-1]) + _INF_BOUND
                              + _field(0x1A, last)))
        return b"".join(out)

    def _template(self, width: int) -> bytes:
        template = self._templates.get(width)
        if template is None:
            template = self._templates[width] = b"".join(
                bytes((_TAG_BUCKET, 10 + width, 0x08)) + bytes(width) + bound
                for bound in self._bounds)
        return template


_INF_BOUND = bytes((_TAG_UPPER_BOUND,)) + _double(math.inf)


def _sint_run(values: Iterable[int]) -> bytes:
    """Packed sint64 values (zigzag varints); one bytes() call when all fit in a byte."""
    zigzags = [(v << 1) ^ (v >> 63) for v in values]
    top = max(zigzags, default=0)
    if top < 128:
        return bytes(zigzags)
    if top < 16384:
        return b"".join([_VARINTS[z] for z in zigzags])
    return b"".join(map(varint, zigzags))


def _native_buckets(span_tag: int, delta_tag: int, counts: Sequence[int], offset: int) -> bytes:
    if len(counts) == 1 and -64 <= offset < 64 and counts[0] < 64:
        # One bucket (a histogram served as sum and count, or a fresh one): one span, one
        # delta, every varint a single byte.
        return bytes((span_tag, 4, 0x08, _zigzag(offset), 0x10, 1, delta_tag, 1,
                      counts[0] << 1))
    spans, deltas = spans_and_deltas(counts, offset)
    # BucketSpan{offset, length}, both written even when 0 (valid, and one fixed shape).
    span_fields = b"".join([
        bytes((span_tag, 4, 0x08, zigzag, 0x10, length)) if zigzag < 128 and length < 128
        else _field(span_tag, b"\x08" + varint(zigzag) + b"\x10" + varint(length))
        for zigzag, length in [(_zigzag(offset), length) for offset, length in spans]])
    return span_fields + _field(delta_tag, _sint_run(deltas))


_SCHEMAS = {schema: bytes((_TAG_SCHEMA,)) + varint(_zigzag(schema))
            for schema in range(MIN_SCHEMA, MAX_SCHEMA + 1)}
_ZERO_THRESHOLD = bytes((_TAG_ZERO_THRESHOLD,)) + _double(DEFAULT_ZERO_THRESHOLD)


def histogram(label_fields: bytes, count: int, total: float, *,
              classic: ClassicBuckets | None = None, counts: Sequence[int] = (),
              exemplars: Sequence[bytes | None] = (), native: NativeBuckets | None = None,
              native_exemplars: Sequence[bytes] = ()) -> bytes:
    """A histogram child as a MetricFamily.metric record: classic and/or native buckets.

    `counts` (per bucket, +Inf last) and `exemplars` (encoded, or None, per bucket) are for the
    `classic` buckets; `native_exemplars` belong to the native histogram itself, for pages
    without classic buckets.
    """
    return histogram_record(label_fields, histogram_body(
        count, total, classic=classic, counts=counts, exemplars=exemplars, native=native,
        native_exemplars=native_exemplars))


def histogram_record(label_fields: bytes, body: bytes) -> bytes:
    """A MetricFamily.metric record of a Histogram message's fields (`histogram_body`), so that
    a body shared by many children (an empty histogram) is encoded once."""
    return _metric(label_fields, 0x3A, body)


def histogram_body(count: int, total: float, *, classic: ClassicBuckets | None = None,
                   counts: Sequence[int] = (), exemplars: Sequence[bytes | None] = (),
                   native: NativeBuckets | None = None,
                   native_exemplars: Sequence[bytes] = ()) -> bytes:
    """The fields of a Histogram message (see `histogram`)."""
    out = [b"\x08" + varint(count) if count else b"", b"\x11" + _double(total) if total else b""]
    if classic is not None:
        out.append(classic.encode(counts, exemplars))
    if native is not None:
        if native.schema:
            out.append(_SCHEMAS[native.schema])
        if native.zero_threshold:
            out.append(_ZERO_THRESHOLD if native.zero_threshold == DEFAULT_ZERO_THRESHOLD else
                       bytes((_TAG_ZERO_THRESHOLD,)) + _double(native.zero_threshold))
        if native.zero_count:
            out.append(bytes((_TAG_ZERO_COUNT,)) + varint(native.zero_count))
        if native.negative_counts:
            out.append(_native_buckets(_TAG_NEGATIVE_SPAN, _TAG_NEGATIVE_DELTA,
                                       native.negative_counts, native.negative_offset))
        if native.positive_counts:
            out.append(_native_buckets(_TAG_POSITIVE_SPAN, _TAG_POSITIVE_DELTA,
                                       native.positive_counts, native.positive_offset))
        elif not (native.zero_threshold or native.zero_count or native.negative_counts):
            # Nothing else would tell Prometheus that this histogram is native: a no-op span.
            out.append(_field(_TAG_POSITIVE_SPAN, b""))
        out.extend(_field(_TAG_EXEMPLARS, example) for example in native_exemplars)
    return b"".join(out)


def family(name: str, help_text: str, kind: MetricType, records: Iterable[bytes]) -> bytes:
    """One length-prefixed MetricFamily: header and the children's metric records."""
    body = b"".join(records)
    return family_header(name, help_text, kind, len(body)) + body


def family_header(name: str, help_text: str, kind: MetricType, records_size: int) -> bytes:
    """The length prefix and header fields of a MetricFamily whose metric records (written
    right after it) take `records_size` bytes."""
    header = _text(0x0A, name) + (_text(0x12, help_text) if help_text else b"") + (
        b"\x18" + varint(kind) if kind else b"")
    return varint(len(header) + records_size) + header


# -- prometheus_client families (the exporter's own metrics, process metrics) ---------------------

_CLIENT_TYPES = {"counter": MetricType.COUNTER, "gauge": MetricType.GAUGE,
                 "summary": MetricType.SUMMARY, "histogram": MetricType.HISTOGRAM,
                 "gaugehistogram": MetricType.GAUGE_HISTOGRAM, "info": MetricType.GAUGE,
                 "stateset": MetricType.GAUGE, "unknown": MetricType.UNTYPED}


def _client_exemplar(example: ClientExemplar | None) -> bytes | None:
    if example is None:
        return None
    stamp = example.timestamp  # a float, or a Timestamp where a parser made the exemplar
    return exemplar(sorted(example.labels.items()), example.value,
                    None if stamp is None else float(stamp))


def from_client(families: Iterable[ClientFamily]) -> bytes:
    """Families collected from prometheus_client (classic buckets only), encoded."""
    return b"".join(_from_client(f) for f in families)


@dataclass
class _ClientChild:
    """The samples of one child of a prometheus_client family, sorted out."""

    buckets: list[tuple[float, float, ClientExemplar | None]] = field(default_factory=list)
    quantiles: list[tuple[float, float]] = field(default_factory=list)
    count: float | None = None
    total: float = 0.0
    value: float = 0.0
    exemplar: ClientExemplar | None = None


def _from_client(source: ClientFamily) -> bytes:
    kind = _CLIENT_TYPES.get(source.type, MetricType.UNTYPED)
    name = source.name + {"counter": "_total", "info": "_info"}.get(source.type, "")
    children: dict[tuple[tuple[str, str], ...], _ClientChild] = {}
    for sample in source.samples:
        suffix = sample.name[len(source.name):]
        if suffix == "_created":
            continue
        child = children.setdefault(tuple(sorted(
            (k, v) for k, v in sample.labels.items() if k not in ("le", "quantile"))),
            _ClientChild())
        if suffix == "_bucket":
            child.buckets.append((float(sample.labels["le"]), sample.value, sample.exemplar))
        elif suffix in ("_count", "_gcount"):
            child.count = sample.value
        elif suffix in ("_sum", "_gsum"):
            child.total = sample.value
        elif "quantile" in sample.labels:
            child.quantiles.append((float(sample.labels["quantile"]), sample.value))
        else:
            child.value, child.exemplar = sample.value, sample.exemplar
    if not children:  # an empty MetricFamily is not valid exposition
        return b""
    records = []
    for child_labels, child in children.items():
        fields = labels(child_labels)
        if kind in (MetricType.HISTOGRAM, MetricType.GAUGE_HISTOGRAM):
            records.append(_client_histogram(fields, child))
        elif kind == MetricType.SUMMARY:
            records.append(summary(fields, int(child.count or 0), child.total, child.quantiles))
        elif kind == MetricType.COUNTER:
            records.append(counter(fields, child.value, _client_exemplar(child.exemplar)))
        elif kind == MetricType.GAUGE:
            records.append(gauge(fields, child.value))
        else:
            records.append(untyped(fields, child.value))
    return family(name, source.documentation, kind, records)


def _client_histogram(fields: bytes, child: _ClientChild) -> bytes:
    buckets = sorted(child.buckets, key=lambda b: b[0])
    finite = [b for b in buckets if b[0] != math.inf]
    cumulative = [int(c) for _, c, _ in finite]
    count = int(child.count if child.count is not None else buckets[-1][1] if buckets else 0)
    counts = [c - p for c, p in zip([*cumulative, count], [0, *cumulative], strict=True)]
    exemplars = [_client_exemplar(e) for _, _, e in finite]
    exemplars.append(_client_exemplar(buckets[-1][2]) if buckets and buckets[-1][0] == math.inf
                     else None)
    return histogram(fields, count, child.total,
                     classic=ClassicBuckets([b[0] for b in finite]), counts=counts,
                     exemplars=exemplars)


def wants_protobuf(accept: str) -> bool:
    """Whether an Accept header prefers the delimited MetricFamily protobuf (q ≥ every other)."""
    best_other, protobuf = 0.0, 0.0
    for entry in accept.split(","):
        media, *params = (part.strip() for part in entry.split(";"))
        if not media:
            continue
        values = dict(p.partition("=")[::2] for p in params)
        try:
            q = float(values.get("q", "1"))
        except ValueError:
            q = 0.0
        if (media == "application/vnd.google.protobuf"
                and values.get("proto") == "io.prometheus.client.MetricFamily"
                and values.get("encoding") == "delimited"):
            protobuf = max(protobuf, q)
        else:
            best_other = max(best_other, q)
    return protobuf > 0 and protobuf >= best_other

"""An independent decoder of the protobuf exposition, generated from tests/proto/metrics.proto.

grpcio-tools' bundled protoc generates `metrics_pb2` into a temporary folder once per process; the
protobuf runtime parses with it. Nothing here shares code with exporter/protobuf.py.
"""

from __future__ import annotations

import functools
import importlib
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc_tools
from grpc_tools import protoc
from prometheus_client.utils import floatToGoString

PROTO_DIR = Path(__file__).resolve().parent / "proto"


@functools.cache
def metrics_pb2() -> ModuleType:
    """The generated module for io.prometheus.client (MetricFamily, Histogram, …)."""
    out = Path(tempfile.mkdtemp(prefix="metrics-pb2-"))
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    status = protoc.main(["protoc", f"-I{PROTO_DIR}", f"-I{well_known}", f"--python_out={out}",
                          str(PROTO_DIR / "metrics.proto")])
    assert status == 0, "protoc failed on tests/proto/metrics.proto"
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("metrics_pb2")
    finally:
        sys.path.remove(str(out))


def read_varint(data: bytes, position: int) -> tuple[int, int]:
    """A base-128 varint at `position`: (value, position after it)."""
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, position


def decode(data: bytes) -> list[Any]:
    """A delimited stream of MetricFamily messages, parsed."""
    pb = metrics_pb2()
    families, position = [], 0
    while position < len(data):
        length, position = read_varint(data, position)
        message = pb.MetricFamily()
        message.ParseFromString(data[position:position + length])
        families.append(message)
        position += length
    assert position == len(data), "a family's length runs past the end of the page"
    return families


def by_name(data: bytes) -> dict[str, Any]:
    """The decoded families keyed by name."""
    return {f.name: f for f in decode(data)}


def text_samples(families: list[Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What the decoded families say as text-format samples (classic buckets, +Inf = count)."""
    pb = metrics_pb2()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in families:
        for metric in family.metric:
            labels = tuple((pair.name, pair.value) for pair in metric.label)
            if family.type == pb.HISTOGRAM:
                h = metric.histogram
                for bucket in h.bucket:
                    le = floatToGoString(bucket.upper_bound)
                    out[(f"{family.name}_bucket", tuple(sorted((*labels, ("le", le)))))] = \
                        bucket.cumulative_count
                if h.bucket:
                    out[(f"{family.name}_bucket", tuple(sorted((*labels, ("le", "+Inf")))))] = \
                        h.sample_count
                out[(f"{family.name}_count", labels)] = h.sample_count
                out[(f"{family.name}_sum", labels)] = h.sample_sum
            elif family.type == pb.SUMMARY:
                for quantile in metric.summary.quantile:
                    key = tuple(sorted((*labels, ("quantile", floatToGoString(quantile.quantile)))))
                    out[(family.name, key)] = quantile.value
                out[(f"{family.name}_count", labels)] = metric.summary.sample_count
                out[(f"{family.name}_sum", labels)] = metric.summary.sample_sum
            else:
                kind = {pb.COUNTER: "counter", pb.GAUGE: "gauge", pb.UNTYPED: "untyped"}
                out[(family.name, labels)] = getattr(metric, kind[family.type]).value
    return out


def expand_spans(spans: Iterable[tuple[int, int]], deltas: Sequence[int]) -> dict[int, int]:
    """The spec's decoding of (offset, length) spans and count deltas into {index: count}."""
    out, index, count, position = {}, 0, 0, 0
    for n, (offset, length) in enumerate(spans):
        index = offset if n == 0 else index + offset
        for _ in range(length):
            count += deltas[position]
            position += 1
            if count:
                out[index] = count
            index += 1
    assert position == len(deltas), "spans and deltas disagree"
    return out


def native_buckets(h: Any) -> dict[int, int]:
    """A decoded native histogram's positive buckets as {index: count}."""
    return expand_spans(((s.offset, s.length) for s in h.positive_span), h.positive_delta)

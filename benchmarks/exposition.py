"""Exposition: page bytes and render cost per series, Prometheus text vs OpenMetrics vs protobuf.

In process, with the real families (`ExporterMetrics`, default buckets: 7 histogram families,
phases ×6) for N series named like benchmarks/scale.py's (t000 × m0…m9 × p0…p9), each with a
history of K probes of realistic, jittered timings (TTFT ~0.4 s, 64 tokens, 63 inter-chunk gaps,
six phases). Measures:

- bytes per series of each format (protobuf with classic buckets kept, and native-only);
- render time per series: cold (every series recorded a probe since the last scrape) and cached;
- the encoder decision: our sans-IO encoder vs the `protobuf` runtime (message classes that
  grpcio-tools generates from tests/proto/metrics.proto) serialising the same Metric records;
- record cost per probe, and memory per series (tracemalloc).

    python -m benchmarks.exposition [--series 1000] [--probes 100] [--schema 3,5] [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from benchmarks.common import machine_line, table
from exporter.config import parse_config
from exporter.errors import Result
from exporter.exposition import protobuf
from exporter.exposition.families import FamilySpec, MetricType
from exporter.exposition.metrics import ExporterMetrics
from exporter.exposition.nativehist import spans_and_deltas
from exporter.exposition.store import SeriesValues
from exporter.exposition.writers import ProtobufWriter, walk
from exporter.result import Phase, ProbeResult, Timings, TokenSource, Usage
from tests.protodecode import metrics_pb2

MODELS, PROBES, TOKENS = 10, 10, 64


def build(series: int, schema: int, max_buckets: int = 160) -> ExporterMetrics:
    """ExporterMetrics for `series` series with default buckets and the given native schema."""
    targets = max(1, series // (MODELS * PROBES))
    data: dict[str, Any] = {
        "global": {"max_series": max(10_000, series),
                   "native_histograms": {"schema": schema, "max_buckets": max_buckets}},
        "probes": {f"p{j}": {"prompt": "hi"} for j in range(PROBES)},
        "targets": [{"name": f"t{t:03d}", "base_url": "http://127.0.0.1:1/v1",
                     "models": [f"m{i}" for i in range(MODELS)]}
                    for t in range(targets)],
    }
    # No refresher: "cold" renders measure the encoding a scrape would otherwise wait for.
    metrics = ExporterMetrics(CollectorRegistry(), parse_config(data, env={}), refresh=False)
    assert metrics.probes is not None and len(metrics.probes.series) == series, \
        "--series must be a multiple of 100"
    return metrics


def lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(median), sigma)


def probe_result(key: tuple[str, str, str], rng: random.Random) -> ProbeResult:
    """One successful probe with jittered, realistic timings."""
    phases = {Phase.RESOLVE: lognormal(rng, 0.002, 0.5), Phase.CONNECT: lognormal(rng, 0.01, 0.3),
              Phase.TLS: lognormal(rng, 0.03, 0.3), Phase.WAIT: lognormal(rng, 0.3, 0.3),
              Phase.FIRST_TOKEN: lognormal(rng, 0.05, 0.5)}
    ttft = sum(phases.values())
    gaps = tuple(lognormal(rng, 0.02, 0.5) for _ in range(TOKENS - 1))
    phases[Phase.GENERATE] = sum(gaps)
    duration = ttft + phases[Phase.GENERATE] + 0.002
    timings = Timings(ttft=ttft, time_to_first_answer=ttft, tpot=sum(gaps) / (TOKENS - 1),
                      tps=TOKENS / duration, duration=duration, inter_chunk=gaps, phases=phases)
    return ProbeResult(target=key[0], model=key[1], probe=key[2], result=Result.SUCCESS,
                       timings=timings, usage=Usage(prompt=12, completion=TOKENS),
                       output_tokens=TOKENS, token_source=TokenSource.USAGE,
                       finished_at=time.time(), response_id=f"chatcmpl-{rng.getrandbits(64):x}")


def history(metrics: ExporterMetrics, probes: int, rng: random.Random) -> list[ProbeResult]:
    """Record `probes` probes into every series; returns one more result per series."""
    assert metrics.probes is not None
    keys = list(metrics.probes.series)
    for _ in range(probes):
        for key in keys:
            metrics.record(probe_result(key, rng))
    return [probe_result(key, rng) for key in keys]


def best_time(fn: Callable[[], Any], before: Callable[[], Any] | None = None,
              rounds: int = 5) -> float:
    """Fewest seconds `fn()` took over rounds, `before()` (untimed) ahead of each: on a shared
    machine the fastest round is the one the least disturbed by others."""
    times = []
    for _ in range(rounds):
        if before is not None:
            before()
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


# -- the protobuf runtime, for the encoder decision ----------------------------------------------

def runtime_records(values: SeriesValues, spec: FamilySpec, classic: bool, pb: Any) -> bytes:
    """The same metric records as `writers.ProtobufWriter`, built with the runtime."""
    out = []
    def labels(spec: FamilySpec, extra: str | None) -> list[tuple[str, str]]:
        extra_pair = [(spec.label, extra)] if spec.label and extra is not None else []
        return sorted([*values.label_items, *extra_pair])

    for (family, extra), hist in values.histogram_items():
        if family is not spec.key:
            continue
        metric = pb.Metric()
        for name, value in labels(spec, extra):
            pair = metric.label.add()
            pair.name, pair.value = name, value
        h = metric.histogram
        h.sample_count = sum(hist.counts)
        h.sample_sum = hist.total
        if classic:
            cumulative = 0
            exemplars = hist.exemplars or [None] * len(hist.counts)
            for edge, count, example in zip(spec.buckets, hist.counts, exemplars, strict=False):
                cumulative += count
                bucket = h.bucket.add()
                bucket.cumulative_count, bucket.upper_bound = cumulative, edge
                if example is not None:
                    pair = bucket.exemplar.label.add()
                    pair.name, pair.value = "response_id", example[0]
                    bucket.exemplar.value = example[1]
                    bucket.exemplar.timestamp.FromNanoseconds(int(example[2] * 1e9))
        native = hist.native
        h.schema, h.zero_threshold, h.zero_count = (native.schema, native.zero_threshold,
                                                    native.zero_count)
        spans, deltas = spans_and_deltas(native.positive_counts, native.positive_offset)
        for offset, length in spans:
            span = h.positive_span.add()
            span.offset, span.length = offset, length
        h.positive_delta.extend(deltas)
        data = metric.SerializeToString()
        out.append(b"\x22" + protobuf.varint(len(data)) + data)
    for (family, extra), value in values.scalar_items():
        if family is not spec.key:
            continue
        metric = pb.Metric()
        for name, label_value in labels(spec, extra):
            pair = metric.label.add()
            pair.name, pair.value = name, label_value
        (metric.counter if spec.type is MetricType.COUNTER else metric.gauge).value = value
        data = metric.SerializeToString()
        out.append(b"\x22" + protobuf.varint(len(data)) + data)
    return b"".join(out)


# -- the run -------------------------------------------------------------------------------------

def measure(series: int, probes: int, schema: int, rounds: int) -> dict[str, Any]:
    """Every number of one schema."""
    rng = random.Random(schema)
    metrics = build(series, schema)
    collector = metrics.probes
    assert collector is not None
    fresh = history(metrics, probes, rng)

    def record_all() -> None:
        for result in fresh:
            metrics.record(result)

    record_s = best_time(record_all, None, rounds) / series
    pages = {"text": metrics.render(), "openmetrics": metrics.render(openmetrics=True),
             "protobuf": metrics.render_protobuf()}
    metrics.classic_in_protobuf = False
    pages["protobuf native-only"] = metrics.render_protobuf()
    metrics.classic_in_protobuf = True

    def touch() -> None:  # every series recorded a probe since the last scrape
        for result in fresh:
            metrics.record(result)

    timings: dict[str, tuple[float, float]] = {}
    for name, render in (("text", metrics.render),
                         ("openmetrics", lambda: metrics.render(openmetrics=True)),
                         ("protobuf", metrics.render_protobuf)):
        cold = best_time(render, touch, rounds)
        render()
        cached = best_time(render, None, rounds)
        timings[name] = (cold / series, cached / series)
    pb = metrics_pb2()
    specs = list(collector.families.values())
    values = list(collector.series.values())

    def ours() -> None:
        for s in values:
            walk(s, specs, ProtobufWriter(s, True), b"")  # the uncached encoding

    def runtime() -> None:
        for s in values:
            for spec in specs:
                runtime_records(s, spec, True, pb)

    encoders = {"ours": best_time(ours, None, rounds) / series,
                "runtime": best_time(runtime, None, rounds) / series}
    native_buckets = [len(h.native.positive) for s in values for _, h in s.histogram_items()]
    return {"schema": schema, "pages": pages, "timings": timings, "encoders": encoders,
            "record": record_s, "buckets": statistics.mean(native_buckets),
            "max_buckets": max(native_buckets)}


def memory_per_series(series: int, probes: int, schema: int) -> dict[str, float]:
    """Bytes allocated per series: its values after a history, then each format's cache."""
    grown: dict[str, float] = {}
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    metrics = build(series, schema)
    after = tracemalloc.take_snapshot()
    grown["config and children at load"] = sum(
        s.size_diff for s in after.compare_to(before, "filename")) / series
    rng = random.Random(1)
    keys = list(metrics.probes.series) if metrics.probes else []
    results = [probe_result(key, rng) for key in keys]  # kept apart: not the exporter's memory
    before = tracemalloc.take_snapshot()

    def record() -> None:
        for _ in range(probes):
            for result in results:
                metrics.record(result)

    steps = ((f"values after {probes} probes", record),
             ("protobuf cache", metrics.render_protobuf),
             ("text cache", metrics.render),
             ("OpenMetrics cache", lambda: metrics.render(openmetrics=True)))
    for name, render in steps:
        render()
        gc.collect()
        after = tracemalloc.take_snapshot()
        grown[name] = sum(s.size_diff for s in after.compare_to(before, "filename")) / series
        before = after
    tracemalloc.stop()
    return grown


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=100, help="history per series")
    parser.add_argument("--schema", default="3,5")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny CI run (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.series, args.probes, args.rounds = 100, 2, 1
    print(f"# exposition: {args.series} series, {args.probes} probes each "
          f"({TOKENS} tokens), default buckets · {machine_line()}\n")
    runs = [measure(args.series, args.probes, int(s), args.rounds)
            for s in args.schema.split(",")]
    rows = []
    for run in runs:
        for name, page in run["pages"].items():
            timing = run["timings"].get(name)
            rows.append([run["schema"], name, f"{len(page) / args.series / 1024:.2f}",
                         f"{timing[0] * 1e6:.0f}" if timing else "–",
                         f"{timing[1] * 1e6:.1f}" if timing else "–"])
    print(table(["schema", "format", "KiB / series", "render µs / series (cold)",
                 "(cached)"], rows))
    print("\nEncoder decision: the same protobuf records per series, uncached")
    print(table(["schema", "native buckets / histogram (mean, max)", "ours µs / series",
                 "protobuf runtime µs / series", "ours / runtime", "record µs / probe"],
                [[r["schema"], f"{r['buckets']:.1f}, {r['max_buckets']}",
                  f"{r['encoders']['ours'] * 1e6:.0f}", f"{r['encoders']['runtime'] * 1e6:.0f}",
                  f"{r['encoders']['ours'] / r['encoders']['runtime']:.2f}",
                  f"{r['record'] * 1e6:.1f}"] for r in runs]))
    memory = memory_per_series(min(args.series, 500) // 100 * 100, args.probes,
                               runs[0]["schema"])
    print(f"\nmemory per series (tracemalloc, schema {runs[0]['schema']}; what each step "
          "adds):")
    print(table(["part", "KiB / series"], [[name, f"{size / 1024:.1f}"]
                                           for name, size in memory.items()]))


if __name__ == "__main__":
    main()

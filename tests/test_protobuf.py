"""The protobuf exposition, decoded by an independent (protoc-generated) decoder."""

from __future__ import annotations

import dataclasses
import math
import sys
import threading

import pytest
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    Info,
    Summary,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Exemplar, Timestamp

from exporter.errors import Result
from exporter.exposition import protobuf
from exporter.exposition.collector import ProbeCollector
from exporter.exposition.families import BY_KEY, Family
from exporter.exposition.metrics import ExporterMetrics
from exporter.exposition.nativehist import DEFAULT_ZERO_THRESHOLD, NativeBuckets, bucket_index
from exporter.probe.prober import Prober
from exporter.result import Phase, ProbeResult, Timings, TokenSource, Usage
from exporter.serve.results import ResultStore
from exporter.serve.scheduler import Scheduler
from exporter.serve.server import ServerState, create_app
from tests.conftest import make_config
from tests.protodecode import by_name, decode, metrics_pb2, native_buckets, text_samples


def success(**changes) -> ProbeResult:
    """A successful probe of series (t, m, short) with a response id (an exemplar)."""
    timings = Timings(ttft=0.25, time_to_first_answer=0.4, tpot=0.02, tps=30.0, duration=1.2,
                      inter_chunk=(0.02, 0.03), phases={Phase.WAIT: 0.01, Phase.GENERATE: 0.9})
    fields = dict(target="t", model="m", probe="short", result=Result.SUCCESS, timings=timings,
                  usage=Usage(prompt=10, completion=36), output_tokens=36,
                  token_source=TokenSource.USAGE, finished_at=1700000000.0,
                  response_id="chatcmpl-abc")
    return ProbeResult(**{**fields, **changes})


# What Prometheus 2.42 sends with and without --enable-feature=native-histograms.
ACCEPT_PROTOBUF = ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                   "encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,"
                   "application/openmetrics-text;version=0.0.1;q=0.75,"
                   "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
ACCEPT_TEXT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
               "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


@pytest.mark.parametrize(("value", "encoded"), [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
    (16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"), (2**63 - 1, b"\xff" * 8 + b"\x7f"),
    (-1, b"\xff" * 9 + b"\x01"),
])
def test_varint_table(value, encoded):
    assert protobuf.varint(value) == encoded


@pytest.mark.parametrize(("accept", "wanted"), [
    (ACCEPT_PROTOBUF, True),
    (ACCEPT_TEXT, False),
    ("", False),
    ("*/*", False),
    ("text/html,application/xhtml+xml,*/*;q=0.8", False),
    ("application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
     "encoding=delimited", True),
    ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
     "encoding=delimited;q=0", False),
    ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
     "encoding=text", False),  # the text form of protobuf: not what we write
    ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily", False),
    ("application/openmetrics-text;version=1.0.0,application/vnd.google.protobuf;"
     "proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5", False),
    ("text/plain;q=0.5,application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
     "encoding=delimited;q=0.9", True),
    ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
     "encoding=delimited;q=bogus", False),
])
def test_wants_protobuf(accept, wanted):
    assert protobuf.wants_protobuf(accept) is wanted


def histogram_of(record: bytes):
    family = decode(protobuf.family("h", "", protobuf.MetricType.HISTOGRAM, [record]))[0]
    return family.metric[0].histogram


def test_classic_and_native_buckets_round_trip():
    values = [0.0, 0.003, 0.1, 0.1, 0.42, 0.42, 0.42, 3.0, 250.0]
    edges = (0.1, 0.5, 1.0)
    native = NativeBuckets(schema=3)
    counts = [0] * (len(edges) + 1)
    for value in values:
        native.observe(value)
        counts[sum(value > edge for edge in edges)] += 1
    h = histogram_of(protobuf.histogram(
        protobuf.labels([("a", "x")]), len(values), sum(values),
        classic=protobuf.ClassicBuckets(edges), counts=counts, native=native))
    assert h.sample_count == 9 and h.sample_sum == pytest.approx(sum(values))
    assert [(b.upper_bound, b.cumulative_count) for b in h.bucket] == [
        (0.1, 4), (0.5, 7), (1.0, 7)]  # +Inf left out: it is the count
    assert h.schema == 3 and h.zero_threshold == DEFAULT_ZERO_THRESHOLD and h.zero_count == 1
    expected: dict[int, int] = {}
    for value in values[1:]:
        expected[bucket_index(value, 3)] = expected.get(bucket_index(value, 3), 0) + 1
    assert native_buckets(h) == expected
    assert not h.negative_span and not h.exemplars


def test_negative_schema_and_negative_buckets():
    native = NativeBuckets(schema=-2, zero_threshold=0.0)
    for value in (-1.0, -1.5, -100.0, 7.0):
        native.observe(value)
    h = histogram_of(protobuf.histogram(b"", 4, -95.5, native=native))
    assert h.schema == -2 and h.zero_threshold == 0 and not h.bucket
    assert native_buckets(h) == {1: 1}
    negative = {}
    index = 0
    position = 0
    for n, span in enumerate(h.negative_span):
        index = span.offset if n == 0 else index + span.offset
        for _ in range(span.length):
            negative[index] = sum(h.negative_delta[:position + 1])
            position += 1
            index += 1
    assert {k: v for k, v in negative.items() if v} == {0: 1, 1: 1, 2: 1}
    assert h.sample_sum == -95.5


def test_empty_native_histogram_is_still_native():
    h = histogram_of(protobuf.histogram(b"", 0, 0.0, native=NativeBuckets()))
    assert h.zero_threshold > 0  # what tells Prometheus 2.x that it is native
    bare = histogram_of(protobuf.histogram(b"", 0, 0.0,
                                           native=NativeBuckets(zero_threshold=0.0)))
    assert [(s.offset, s.length) for s in bare.positive_span] == [(0, 0)]  # the no-op span


def test_exemplars_on_classic_buckets_inf_and_native():
    example = protobuf.exemplar([("response_id", "chatcmpl-1")], 7.5, 1700000000.123456)
    h = histogram_of(protobuf.histogram(
        b"", 2, 7.7, classic=protobuf.ClassicBuckets((0.5,)), counts=[1, 1],
        exemplars=[protobuf.exemplar([("response_id", "a")], 0.2, 1700000000.0), example]))
    assert [b.upper_bound for b in h.bucket] == [0.5, math.inf]
    assert h.bucket[0].exemplar.label[0].value == "a"
    assert h.bucket[0].exemplar.timestamp.seconds == 1700000000
    last = h.bucket[1]
    assert last.cumulative_count == 2 and last.exemplar.value == 7.5
    assert last.exemplar.timestamp.seconds == 1700000000
    assert last.exemplar.timestamp.nanos == pytest.approx(123456000, abs=1000)
    native_only = histogram_of(protobuf.histogram(b"", 1, 7.5, native=NativeBuckets(),
                                                  native_exemplars=[example]))
    assert not native_only.bucket
    assert native_only.exemplars[0].label[0].name == "response_id"


@pytest.mark.parametrize("scale", [1, 127, 128, 16383, 16384, 2**21, 2**35])
@pytest.mark.parametrize("with_exemplars", [False, True])
def test_classic_counts_of_every_varint_width(scale, with_exemplars):
    counts = [0, scale, 1, 0, scale, 2]  # per bucket, +Inf last
    edges = (0.001, 0.01, 0.1, 1.0, 10.0)
    example = protobuf.exemplar([("response_id", "r")], 0.05, 1.0)
    exemplars = [None, None, example, None, None, example] if with_exemplars else ()
    h = histogram_of(protobuf.histogram(b"", sum(counts), 1.0,
                                        classic=protobuf.ClassicBuckets(edges), counts=counts,
                                        exemplars=exemplars))
    cumulative = [0, scale, scale + 1, scale + 1, 2 * scale + 1]
    finite = [(b.upper_bound, b.cumulative_count) for b in h.bucket if b.upper_bound != math.inf]
    assert finite == list(zip(edges, cumulative, strict=True))
    assert [b.exemplar.value for b in h.bucket if b.HasField("exemplar")] == (
        [0.05, 0.05] if with_exemplars else [])
    if with_exemplars:
        assert h.bucket[-1].upper_bound == math.inf
        assert h.bucket[-1].cumulative_count == 2 * scale + 3


def test_long_labels_and_big_counts():
    value = "x" * 300 + "é"
    fields = protobuf.labels([("target", value)])
    family = decode(protobuf.family("c_total", "h" * 200, protobuf.MetricType.COUNTER,
                                    [protobuf.counter(fields, 2.0**60)]))[0]
    assert family.metric[0].label[0].value == value and family.help == "h" * 200
    assert family.metric[0].counter.value == 2.0**60
    h = histogram_of(protobuf.histogram(b"", 10**12, 1.0, classic=protobuf.ClassicBuckets((1.0,)),
                                        counts=[10**12 - 1, 1]))
    assert h.sample_count == 10**12 and h.bucket[0].cumulative_count == 10**12 - 1


def client_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("jobs", "Jobs done.", ["kind"], registry=registry).labels("a").inc(3)
    Gauge("temperature", "A gauge.", registry=registry).set(-4.5)
    hist = Histogram("latency_seconds", "A histogram.", ["path"], buckets=(0.1, 1.0),
                     registry=registry)
    for value in (0.05, 0.5, 5.0):
        hist.labels("/x").observe(value)
    Summary("size_bytes", "A summary.", registry=registry).observe(12.0)
    Info("build", "Build info.", registry=registry).info({"version": "1.2"})
    Enum("state", "An enum.", states=["up", "down"], registry=registry).state("down")
    Gauge("unused", "A family without children: left out.", ["x"], registry=registry)
    return registry


def test_prometheus_client_families_give_the_text_page_values():
    registry = client_registry()
    text = generate_latest(registry).decode()
    expected = {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples
                if not s.name.endswith("_created")}
    families = decode(protobuf.from_client(registry.collect()))
    assert text_samples(families) == expected
    types = {f.name: f.type for f in families}
    pb = metrics_pb2()
    assert types == {"jobs_total": pb.COUNTER, "temperature": pb.GAUGE,
                     "latency_seconds": pb.HISTOGRAM, "size_bytes": pb.SUMMARY,
                     "build_info": pb.GAUGE, "state": pb.GAUGE}


def test_client_exemplar_timestamps_may_be_parsed_ones():
    """prometheus_client's Exemplar.timestamp is a float or, where a parser made it, a
    Timestamp: both encode the same."""
    def family(stamp: float | Timestamp) -> CounterMetricFamily:
        jobs = CounterMetricFamily("jobs", "Jobs done.", labels=["kind"])
        jobs.add_metric(["a"], 3.0, exemplar=Exemplar({"trace_id": "t1"}, 1.0, stamp))
        return jobs

    parsed = protobuf.from_client([family(Timestamp(1700000000, 250_000_000))])
    assert parsed == protobuf.from_client([family(1700000000.25)])
    counter = by_name(parsed)["jobs_total"].metric[0].counter
    assert counter.exemplar.timestamp.seconds == 1700000000
    assert counter.exemplar.timestamp.nanos == 250_000_000


def exporter_metrics(**native) -> ExporterMetrics:
    global_ = {"labels": {"region": "eu"}, "native_histograms": native} if native else {
        "labels": {"region": "eu"}}
    metrics = ExporterMetrics(CollectorRegistry(), make_config(models=("m", "n"),
                                                               global_=global_),
                              process_metrics=False)  # their values move between two renders
    metrics.record(success())
    metrics.record(success(model="n", response_id=None))
    metrics.record(success(result=Result.TIMEOUT))
    return metrics


def test_exporter_page_gives_the_text_page_values():
    metrics = exporter_metrics()
    text = metrics.render().decode()
    expected = {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}
    page = metrics.render_protobuf()
    assert text_samples(decode(page)) == expected
    # Cached: a second render is the same bytes; a new probe changes them.
    assert metrics.render_protobuf() == page
    metrics.record(success())
    assert metrics.render_protobuf() != page


def test_exporter_histograms_are_native_with_exemplars_on_classic_buckets():
    families = by_name(exporter_metrics().render_protobuf())
    ttft = {tuple(pair.value for pair in m.label): m.histogram
            for m in families["llm_probe_ttft_seconds"].metric}
    h = ttft[("m", "short", "eu", "t")]
    assert h.schema == 3 and h.sample_count == 1 and h.sample_sum == 0.25
    assert native_buckets(h) == {bucket_index(0.25, 3): 1}
    examples = [b.exemplar for b in h.bucket if b.HasField("exemplar")]
    assert [e.label[0].value for e in examples] == ["chatcmpl-abc"]
    assert examples[0].value == 0.25
    assert not ttft[("n", "short", "eu", "t")].exemplars
    phases = families["llm_probe_phase_seconds"].metric
    generate = next(m.histogram for m in phases
                    if ("phase", Phase.GENERATE.value) in {(p.name, p.value) for p in m.label})
    # Phases are served as sum and count: classic +Inf only, native at the coarsest schema.
    assert [b.upper_bound for b in generate.bucket] == [math.inf]
    assert generate.schema == -4 and native_buckets(generate) == {bucket_index(0.9, -4): 1}
    assert families["llm_probe_requests_total"].type == metrics_pb2().COUNTER


def test_native_only_page_and_schema_setting():
    metrics = exporter_metrics(schema=5, max_buckets=20, classic=False)
    families = by_name(metrics.render_protobuf())
    hists = [m.histogram for m in families["llm_probe_inter_chunk_seconds"].metric]
    assert all(not h.bucket and h.schema == 5 for h in hists)
    assert sum(h.sample_count for h in hists) == 4
    ttft = [m.histogram for m in families["llm_probe_ttft_seconds"].metric]
    assert [e.label[0].value for h in ttft for e in h.exemplars] == ["chatcmpl-abc"]
    # Own metrics (prometheus_client) stay classic; the page is smaller without classic buckets.
    assert families["llm_probe_event_loop_lag_seconds"].metric[0].histogram.bucket
    assert len(metrics.render_protobuf()) < len(exporter_metrics().render_protobuf())


def test_bucket_limit_from_the_config():
    metrics = exporter_metrics(schema=8, max_buckets=1)
    metrics.record(success(timings=Timings(ttft=0.5)))
    ttft = by_name(metrics.render_protobuf())["llm_probe_ttft_seconds"].metric
    h = next(m.histogram for m in ttft if m.label[0].value == "m")
    # 0.25 and 0.5 share a bucket from schema −2 on: (1/16, 1].
    assert h.sample_count == 2 and h.schema == -2 and native_buckets(h) == {0: 2}


@pytest.fixture
async def http(aiohttp_client):
    metrics = exporter_metrics()
    store = ResultStore()
    prober = Prober()
    scheduler = Scheduler(prober, metrics, store)

    async def reload() -> None:
        return None

    state = ServerState(metrics.registry, metrics, store, scheduler, None, reload, ready=True)
    yield await aiohttp_client(create_app(state))
    await scheduler.stop()
    await prober.close()


async def test_metrics_negotiates_protobuf_like_prometheus(http):
    response = await http.get("/metrics", headers={"Accept": ACCEPT_PROTOBUF})
    assert response.headers["Content-Type"] == protobuf.CONTENT_TYPE
    families = by_name(await response.read())
    assert families["llm_probe_ttft_seconds"].metric[0].histogram.schema == 3
    assert "llm_probe_build_info" in families
    gzipped = await http.get("/metrics", headers={"Accept": ACCEPT_PROTOBUF,
                                                  "Accept-Encoding": "gzip"})
    assert gzipped.headers["Content-Encoding"] == "gzip"
    assert by_name(await gzipped.read()).keys() == families.keys()
    text = await http.get("/metrics", headers={"Accept": ACCEPT_TEXT})
    assert text.headers["Content-Type"].startswith("application/openmetrics-text")
    plain = await http.get("/metrics")
    assert plain.headers["Content-Type"].startswith("text/plain")


def test_renders_in_another_thread_never_show_a_half_written_observation():
    """Observations land on the loop while scrapes render in a worker thread."""
    spec = dataclasses.replace(BY_KEY[Family.TTFT], buckets=(0.1, 0.5, 1.0))
    collector = ProbeCollector([spec])
    values = collector.add(("t", "m", "p"), [("target", "t")])
    values.create(Family.TTFT)
    done = threading.Event()
    problems: list[tuple[int, int, int]] = []

    def render() -> None:
        while not done.is_set():
            for family in decode(collector.render_protobuf()):
                h = family.metric[0].histogram
                native = h.zero_count + sum(native_buckets(h).values())
                if native != h.sample_count or h.bucket[-1].cumulative_count > h.sample_count:
                    problems.append((h.sample_count, native, h.bucket[-1].cumulative_count))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    thread = threading.Thread(target=render)
    thread.start()
    try:
        for i in range(30_000):
            values.observe(Family.TTFT, 0.001 * (i % 2000 + 1))
    finally:
        done.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert not problems

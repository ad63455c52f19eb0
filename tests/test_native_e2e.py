"""Native histograms end to end: Debian's Prometheus 2.42 scrapes our protobuf page.

A tiny loopback app serves the real `ExporterMetrics` page (schema 5) of synthetic TTFTs with a
wide spread, negotiating the format like `/metrics` does. Two Prometheus servers scrape it: one
with `--enable-feature=native-histograms` (asks for protobuf first, ingests native histograms)
and one without (asks for text only, ingests the classic buckets). PromQL's quantiles over the
native histogram must be within 3 % of the exact quantiles of the observed values; the classic
estimate's error is printed beside it.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from exporter.exposition import protobuf
from exporter.exposition.metrics import ExporterMetrics
from exporter.result import Timings
from tests.conftest import make_config
from tests.e2e_support import Prometheus, prometheus_binary, start_prometheus, wait_for
from tests.protodecode import by_name
from tests.test_protobuf import success

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(prometheus_binary() is None, reason="needs prometheus")]

OBSERVATIONS = 3000
QUANTILES = (0.5, 0.95, 0.99)
SERIES = '{model="m",probe="short",target="t"}'


def wide_spread(n: int, seed: int = 14) -> list[float]:
    """TTFT-like seconds from 0.05 s to ~20 s: a fast mode, a slow mode and a long tail."""
    rng = random.Random(seed)
    modes = ((0.70, 0.35, 0.35), (0.25, 1.2, 0.4), (0.05, 4.0, 0.5))  # share, median, sigma
    values = []
    for _ in range(n):
        pick, acc = rng.random(), 0.0
        for share, median, sigma in modes:
            acc += share
            if pick <= acc:
                values.append(rng.lognormvariate(math.log(median), sigma))
                break
        else:
            values.append(rng.lognormvariate(math.log(4.0), 0.5))
    return values


def exact_quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile: the smallest value with at least q·n values ≤ it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class App:
    """Serves one ExporterMetrics page over HTTP; records every scrape's Accept header."""

    metrics: ExporterMetrics
    lock: threading.Lock = field(default_factory=threading.Lock)
    accepts: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)

    def page(self, accept: str) -> tuple[bytes, str]:
        """The page in the format the Accept header asks for."""
        with self.lock:
            self.accepts.append(accept)
            if protobuf.wants_protobuf(accept):
                self.formats.append("protobuf")
                return self.metrics.render_protobuf(), protobuf.CONTENT_TYPE
            self.formats.append("text")
            return self.metrics.render(), "text/plain; version=0.0.4; charset=utf-8"


@contextmanager
def serve(app: App) -> Iterator[str]:
    """Run the app on a loopback port in a thread; yields host:port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, content_type = app.page(self.headers.get("Accept", ""))
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory) -> Iterator[tuple[App, Prometheus, Prometheus, list[float]]]:
    """The app, a native-histogram Prometheus, a classic one, and the observed values."""
    config = make_config(global_={"native_histograms": {"schema": 5, "max_buckets": 320}})
    app = App(ExporterMetrics(CollectorRegistry(), config))
    values = wide_spread(OBSERVATIONS)
    tmp = tmp_path_factory.mktemp("native-e2e")
    with serve(app) as address:
        native = start_prometheus(_folder(tmp, "native"), [address],
                                  flags=["--enable-feature=native-histograms"])
        classic = start_prometheus(_folder(tmp, "classic"), [address])
        try:
            # Both have stored the empty histogram before the observations arrive, so that
            # rate() over the run sees all of them as an increase.
            for prometheus in (native, classic):
                wait_for(lambda p=prometheus: p.query("llm_probe_success"), 30,
                         "a first scrape")
            with app.lock:
                for value in values:
                    app.metrics.record(success(timings=Timings(ttft=value)))
            wait_for(lambda: native.query(
                f"histogram_count(llm_probe_ttft_seconds{SERIES}) == {OBSERVATIONS}"), 30,
                "the native Prometheus to store every observation")
            wait_for(lambda: classic.query(
                f"llm_probe_ttft_seconds_count{SERIES} == {OBSERVATIONS}"), 30,
                "the classic Prometheus to store every observation")
            yield app, native, classic, values
        finally:
            native.stop()
            classic.stop()


def _folder(tmp: Path, name: str) -> Path:
    folder = tmp / name
    folder.mkdir()
    return folder


def one_value(prometheus: Prometheus, expr: str) -> float:
    result = prometheus.query(expr)
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])


def test_prometheus_negotiates_protobuf_only_with_the_feature(scraped):
    app, native, classic, _ = scraped
    with app.lock:
        pairs = list(zip(app.accepts, app.formats, strict=True))
    protobuf_accepts = {a for a, f in pairs if f == "protobuf"}
    text_accepts = {a for a, f in pairs if f == "text"}
    assert protobuf_accepts and all(a.startswith(
        "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
        "encoding=delimited") for a in protobuf_accepts)
    assert text_accepts and all("protobuf" not in a for a in text_accepts)
    # The feature-on server stores a native histogram (one sample per histogram) …
    sample = native.query(f"llm_probe_ttft_seconds{SERIES}")[0]
    assert "histogram" in sample
    # … and 2.42 ignores the classic buckets next to it; the other server has only those.
    assert not native.query(f"llm_probe_ttft_seconds_bucket{SERIES}")
    assert classic.query(f"llm_probe_ttft_seconds_bucket{SERIES}")
    assert not classic.query(f"histogram_count(llm_probe_ttft_seconds{SERIES})")
    # Counters and gauges arrive the same either way.
    for prometheus in (native, classic):
        assert one_value(prometheus, 'llm_probe_requests_total{result="success",model="m",'
                                     'probe="short",target="t"}') == OBSERVATIONS
        assert one_value(prometheus, f"llm_probe_success{SERIES}") == 1


def test_native_quantiles_within_3_percent_of_the_exact_ones(scraped):
    _, native, classic, values = scraped
    rows = []
    for q in QUANTILES:
        exact = exact_quantile(values, q)
        from_native = one_value(
            native, f"histogram_quantile({q}, rate(llm_probe_ttft_seconds{SERIES}[5m]))")
        from_classic = one_value(
            classic, f"histogram_quantile({q}, rate(llm_probe_ttft_seconds_bucket{SERIES}[5m]))")
        rows.append((q, exact, from_native, from_classic))
    print(f"\n{OBSERVATIONS} TTFTs, schema 5 vs the default classic buckets:")
    for q, exact, from_native, from_classic in rows:
        print(f"  p{q * 100:g}: exact {exact:.4f} s · native {from_native:.4f} s "
              f"({(from_native / exact - 1) * 100:+.2f} %) · classic {from_classic:.4f} s "
              f"({(from_classic / exact - 1) * 100:+.2f} %)")
    for q, exact, from_native, _ in rows:
        assert abs(from_native / exact - 1) < 0.03, (q, exact, from_native)


def test_histogram_fraction_at_any_threshold(scraped):
    _, native, _, values = scraped
    for threshold in (0.42, 1.0, 2.5):  # 0.42 s is no classic bucket edge
        exact = sum(v <= threshold for v in values) / len(values)
        estimate = one_value(native, f"histogram_fraction(0, {threshold}, "
                                     f"rate(llm_probe_ttft_seconds{SERIES}[5m]))")
        assert abs(estimate - exact) < 0.01, (threshold, exact, estimate)


def test_schema_count_and_sum_as_served(scraped):
    app, native, _, values = scraped
    with app.lock:
        page = app.metrics.render_protobuf()
    ttft = by_name(page)["llm_probe_ttft_seconds"].metric[0].histogram
    assert ttft.schema == 5 and ttft.sample_count == OBSERVATIONS
    assert one_value(native, f"histogram_sum(llm_probe_ttft_seconds{SERIES})") == \
        pytest.approx(sum(values))

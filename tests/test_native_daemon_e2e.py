"""Native histograms through the whole product: Prometheus 2.42 scrapes the daemon.

The daemon probes its embedded simulator, whose first tokens come with a wide spread (the TTFT
is drawn within ±90 % of 400 ms), with `global.native_histograms: {schema: 5}`. One Prometheus
with `--enable-feature=native-histograms` negotiates the protobuf format and stores native
histograms; another, without it, stores the classic buckets. PromQL's p50/p95/p99 over the
native histograms must be within 3 % of the exact quantiles of the probes' own TTFTs, which the
daemon logs (in the order it records them) at debug level; the classic estimate's error is
printed beside it.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import yaml

from tests.e2e_support import (
    Daemon,
    Prometheus,
    prometheus_binary,
    shipped_config,
    start_daemon,
    start_prometheus,
    wait_for,
)

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(prometheus_binary() is None, reason="needs prometheus")]

MODELS = 16
PROBES = 300
QUANTILES = (0.5, 0.95, 0.99)


def exact_quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile: the smallest value with at least q·n values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def logged_ttfts(daemon: Daemon) -> list[float]:
    """Every successful probe's TTFT, in the order the daemon recorded them."""
    values = []
    for line in daemon.output().splitlines():
        if '"probe finished"' in line:
            values.append(json.loads(line)["ttft"])
    return values


def at(prometheus: Prometheus, expr: str, when: float) -> float:
    """One value of an instant query evaluated at `when` (unix time)."""
    [sample] = prometheus.query(expr, when=when)
    return float(sample["value"][1])


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("native-daemon")
    spread = {"ttft": "400ms", "jitter": 0.9, "tpot": "2ms", "output_tokens": 4}
    config, _ = shipped_config(tmp, interval="300ms",
                               models={f"m{i}": spread for i in range(MODELS)})
    data = yaml.safe_load(config.read_text())
    data["global"]["native_histograms"] = {"schema": 5, "max_buckets": 320}
    data["global"].pop("slo", None)  # objectives would add classic edges; not the point here
    data["targets"] = data["targets"][:1]
    data["probes"] = {"short": {"prompt": "Say hi.", "max_tokens": 16}}
    config.write_text(yaml.safe_dump(data))
    daemon = start_daemon(config, tmp, "--log.level", "debug", "--log.format", "json")
    address = daemon.url.removeprefix("http://")
    native = classic = None
    try:
        (tmp / "native").mkdir()
        (tmp / "classic").mkdir()
        native = start_prometheus(tmp / "native", [address],
                                  flags=["--enable-feature=native-histograms"])
        classic = start_prometheus(tmp / "classic", [address])
        wait_for(lambda: native.query(
            f"sum(histogram_count(llm_probe_ttft_seconds)) >= {PROBES}"), 120,
            f"{PROBES} probes in the native Prometheus")
        wait_for(lambda: classic.query(f"sum(llm_probe_ttft_seconds_count) >= {PROBES}"), 30,
                 f"{PROBES} probes in the classic Prometheus")
        yield daemon, native, classic
    finally:
        for prometheus in (native, classic):
            if prometheus is not None:
                prometheus.stop()
        daemon.stop()


def test_prometheus_stores_native_histograms_from_the_daemon(scraped) -> None:
    _, native, classic = scraped
    [sample] = native.query('llm_probe_ttft_seconds{model="m0"}')
    assert "histogram" in sample  # negotiated protobuf, stored a native histogram
    assert not native.query('llm_probe_ttft_seconds_bucket{model="m0"}')
    assert classic.query('llm_probe_ttft_seconds_bucket{model="m0"}')


def test_native_quantiles_match_the_probes_own_ttfts(scraped) -> None:
    daemon, native, classic = scraped
    when = time.time()
    rows = []
    for prometheus, kind in ((native, "native"), (classic, "classic")):
        if kind == "native":
            count = at(prometheus, "sum(histogram_count(llm_probe_ttft_seconds))", when)
            quantile = "histogram_quantile({q}, sum(llm_probe_ttft_seconds))"
        else:
            count = at(prometheus, "sum(llm_probe_ttft_seconds_count)", when)
            quantile = "histogram_quantile({q}, sum by (le) (llm_probe_ttft_seconds_bucket))"
        # What Prometheus holds at `when` is the first `count` probes the daemon recorded.
        ttfts = wait_for(lambda n=int(count): (v := logged_ttfts(daemon)) and len(v) >= n and
                         v[:n], 10, "the daemon's log to hold every stored probe")
        for q in QUANTILES:
            rows.append((kind, q, exact_quantile(ttfts, q),
                         at(prometheus, quantile.format(q=q), when), len(ttfts)))
    print("\nTTFT quantiles of the daemon's probes (wide spread), PromQL vs exact:")
    for kind, q, exact, estimate, n in rows:
        print(f"  {kind:7} p{q * 100:g} over {n} probes: exact {exact * 1000:.1f} ms, "
              f"PromQL {estimate * 1000:.1f} ms ({(estimate / exact - 1) * 100:+.2f} %)")
    for kind, q, exact, estimate, _ in rows:
        if kind == "native":
            assert abs(estimate / exact - 1) < 0.03, (q, exact, estimate)

"""End to end: the daemon as a subprocess on the shipped config, a real Prometheus, Chromium."""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e_support import (
    chromium,
    http_get,
    page_layout,
    start_daemon,
    start_prometheus,
    wait_for,
)
from tests.e2e_support import shipped_config as make_shipped_config

pytestmark = pytest.mark.e2e

TTFT = 0.3  # the simulator's scripted TTFT (jitter 0)
MODELS = {"sim-chat": {"ttft": "300ms", "tpot": "10ms", "output_tokens": 24, "jitter": 0},
          "sim-reasoner": {"ttft": "300ms", "tpot": "10ms", "output_tokens": 16,
                           "reasoning_tokens": 8, "jitter": 0}}
BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 60)


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory):
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def daemon(tmp_module):
    config, _ = make_shipped_config(tmp_module, models=MODELS)
    daemon = start_daemon(config, tmp_module)
    yield daemon
    assert daemon.stop() == 0, daemon.output()


def bucket_index(value: float) -> int:
    return next((i for i, edge in enumerate(BUCKETS) if value <= edge), len(BUCKETS))


def test_metrics_have_histograms_for_every_series(daemon) -> None:
    def counted() -> bool:
        return all((daemon.sample("llm_probe_ttft_seconds_count", model=m) or 0) >= 3
                   for m in MODELS)
    wait_for(counted, 40, "three probes of each simulated model")
    page = daemon.metrics()
    for family in ("llm_probe_ttft_seconds_bucket", "llm_probe_tpot_seconds_bucket",
                   "llm_probe_output_tokens_per_second_bucket", "llm_probe_duration_seconds_bucket",
                   "llm_probe_time_to_first_answer_seconds_bucket",
                   "llm_probe_inter_chunk_seconds_bucket", "llm_probe_phase_seconds_bucket"):
        assert family in page
    assert "_created" not in page
    for model in MODELS:
        assert daemon.sample("llm_probe_success", model=model) == 1
        assert daemon.sample("llm_probe_requests_total", model=model, result="success") >= 3
        assert daemon.sample("llm_probe_tokens_total", model=model, type="output") > 0
    assert daemon.sample("llm_probe_tokens_total", model="sim-reasoner", type="reasoning") > 0
    assert daemon.sample("llm_probe_build_info") == 1
    assert daemon.sample("llm_probe_config_last_reload_successful") == 1


def test_prometheus_quantile_matches_scripted_ttft(daemon, tmp_module) -> None:
    prometheus = start_prometheus(tmp_module, [daemon.url.removeprefix("http://")])
    try:
        wait_for(prometheus.targets_up, 30, "Prometheus to scrape the exporter")
        expr = ('histogram_quantile(0.5, sum by (le, model) '
                '(rate(llm_probe_ttft_seconds_bucket[30s])))')
        def quantiles() -> list | None:
            found = [r for r in prometheus.query(expr) if r["value"][1] != "NaN"]
            # Both models, each with a rate over the window (not just its first scrape).
            return found if {r["metric"]["model"] for r in found} == set(MODELS) else None

        result = wait_for(quantiles, 60, "a TTFT quantile of every model from Prometheus")
        assert {r["metric"]["model"] for r in result} == set(MODELS)
        for r in result:
            p50 = float(r["value"][1])
            assert abs(bucket_index(p50) - bucket_index(TTFT)) <= 1, (r, p50)
        up = prometheus.query('up{job="llm-probe-exporter"}')
        assert up and up[0]["value"][1] == "1"
    finally:
        prometheus.stop()


def test_promtool_check_metrics_finds_no_problems(daemon) -> None:
    page = http_get(f"{daemon.url}/metrics")
    check = subprocess.run(["promtool", "check", "metrics"], input=page, capture_output=True,
                           timeout=60)
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()


def test_openmetrics_exposition_carries_response_id_exemplars(daemon) -> None:
    page = http_get(f"{daemon.url}/metrics",
                    headers={"Accept": "application/openmetrics-text; version=1.0.0"}).decode()
    assert page.rstrip().endswith("# EOF")
    assert '# {response_id="chatcmpl-' in page


def test_status_page_renders_in_chromium(daemon, tmp_module) -> None:
    wait_for(lambda: b"pending" not in http_get(f"{daemon.url}/"), 30, "every series probed")
    dom = chromium(f"{daemon.url}/", tmp_module)
    assert dom.returncode == 0, dom.stderr
    assert 'id="series"' in dom.stdout
    for model in MODELS:
        assert model in dom.stdout
    assert dom.stdout.count(">success<") >= len(MODELS)
    assert " ms<" in dom.stdout  # real TTFT values rendered
    assert "CONSOLE" not in dom.stderr and "Uncaught" not in dom.stderr
    shot = tmp_module / "status.png"
    run = chromium(f"{daemon.url}/", tmp_module, screenshot=shot, window="1280,900")
    assert run.returncode == 0, run.stderr
    assert shot.exists() and shot.stat().st_size > 10_000
    # Readable at 1,280 px: no column reaches past the window, no cell is cut.
    layout = page_layout(http_get(f"{daemon.url}/").decode(), tmp_module, width=1280)
    assert layout["width"] <= layout["viewport"] and not layout["cut"], layout


def test_config_endpoint_and_probe_endpoint(daemon) -> None:
    config = http_get(f"{daemon.url}/config").decode()
    assert "sim-chat" in config and "simulator" in config
    body = http_get(f"{daemon.url}/probe?target=simulator&model=sim-chat&probe=short").decode()
    assert 'llm_probe_ondemand_success{model="sim-chat",probe="short",target="simulator"} 1.0' \
        in body
    assert "llm_probe_ondemand_ttft_seconds{" in body
    try:
        http_get(f"{daemon.url}/probe?target=simulator&model=gpt-4&probe=short")
    except Exception as exc:  # urllib raises on 400
        assert "400" in str(exc)
    else:
        raise AssertionError("unknown series must be rejected with 400")

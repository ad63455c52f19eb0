"""ExporterMetrics on its own registry: series from start-up, recording, removal on reload."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.errors import Result
from exporter.metrics import DEFAULT_BUCKETS, ExporterMetrics
from exporter.result import Phase, ProbeResult, Timings, TokenSource, Usage
from tests.conftest import make_config

LABELS = {"target": "t", "model": "m", "probe": "short"}


def success(**kw) -> ProbeResult:
    timings = Timings(ttft=0.25, time_to_first_answer=0.4, tpot=0.02, tps=30.0, duration=1.2,
                      inter_chunk=(0.02, 0.03), phases={Phase.WAIT: 0.01, Phase.GENERATE: 0.9})
    defaults = dict(target="t", model="m", probe="short", result=Result.SUCCESS,
                    timings=timings, usage=Usage(prompt=10, completion=36, reasoning=4, cached=2),
                    output_tokens=36, token_source=TokenSource.USAGE, finished_at=1700000000.0,
                    response_id="chatcmpl-abc")
    return ProbeResult(**{**defaults, **kw})


def test_every_series_exists_before_its_first_probe() -> None:
    registry = CollectorRegistry()
    ExporterMetrics(registry, make_config(models=("m", "n")))
    for model in ("m", "n"):
        labels = {**LABELS, "model": model}
        for result in Result:
            assert registry.get_sample_value(
                "llm_probe_requests_total", {**labels, "result": result.value}) == 0
        assert registry.get_sample_value("llm_probe_ttft_seconds_count", labels) == 0
        assert registry.get_sample_value(
            "llm_probe_phase_seconds_count", {**labels, "phase": "generate"}) == 0
        assert registry.get_sample_value("llm_probe_interval_seconds", labels) == 1.0
    page = generate_latest(registry).decode()
    assert "_created" not in page


def test_record_success() -> None:
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, make_config())
    metrics.record(success())
    get = registry.get_sample_value
    assert get("llm_probe_requests_total", {**LABELS, "result": "success"}) == 1
    assert get("llm_probe_ttft_seconds_sum", LABELS) == 0.25
    assert get("llm_probe_ttft_seconds_bucket", {**LABELS, "le": "0.3"}) == 1
    assert get("llm_probe_ttft_seconds_bucket", {**LABELS, "le": "0.2"}) == 0
    assert get("llm_probe_time_to_first_answer_seconds_sum", LABELS) == 0.4
    assert get("llm_probe_tpot_seconds_sum", LABELS) == 0.02
    assert get("llm_probe_output_tokens_per_second_sum", LABELS) == 30.0
    assert get("llm_probe_duration_seconds_sum", LABELS) == 1.2
    assert get("llm_probe_inter_chunk_seconds_count", LABELS) == 2
    assert get("llm_probe_phase_seconds_sum", {**LABELS, "phase": "generate"}) == 0.9
    for kind, count in (("prompt", 10), ("completion", 36), ("reasoning", 4), ("cached", 2)):
        assert get("llm_probe_tokens_total", {**LABELS, "type": kind}) == count
    assert get("llm_probe_success", LABELS) == 1
    assert get("llm_probe_last_run_timestamp_seconds", LABELS) == 1700000000.0


def test_failed_probe_counts_but_does_not_pollute_latency() -> None:
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, make_config())
    metrics.record(success(result=Result.TIMEOUT, ratelimit={"requests": 0.0}))
    get = registry.get_sample_value
    assert get("llm_probe_requests_total", {**LABELS, "result": "timeout"}) == 1
    assert get("llm_probe_ttft_seconds_count", LABELS) == 0
    assert get("llm_probe_success", LABELS) == 0
    assert get("llm_probe_ratelimit_remaining", {**LABELS, "kind": "requests"}) == 0.0


def test_reload_removes_dropped_series_and_keeps_counters() -> None:
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, make_config(models=("m", "n")))
    metrics.record(success())
    metrics.apply(make_config(models=("m",)))
    get = registry.get_sample_value
    assert get("llm_probe_requests_total", {**LABELS, "result": "success"}) == 1
    assert get("llm_probe_requests_total", {**LABELS, "model": "n", "result": "success"}) is None
    assert get("llm_probe_ttft_seconds_count", {**LABELS, "model": "n"}) is None
    metrics.record(success(model="n"))  # a probe of a removed series finishing late
    assert get("llm_probe_ttft_seconds_count", {**LABELS, "model": "n"}) is None


def test_global_labels_and_bucket_override() -> None:
    registry = CollectorRegistry()
    config = make_config(global_={"labels": {"location": "eu-west"},
                                  "buckets": {"ttft": [0.1, 1.0]}})
    metrics = ExporterMetrics(registry, config)
    metrics.record(success())
    labels = {**LABELS, "location": "eu-west"}
    assert registry.get_sample_value("llm_probe_ttft_seconds_bucket",
                                     {**labels, "le": "1.0"}) == 1
    assert registry.get_sample_value("llm_probe_ttft_seconds_bucket",
                                     {**labels, "le": "0.3"}) is None


KEY = "sk-exemplar-canary-0123456789abcdefghijklmnop"


@pytest.mark.parametrize(("response_id", "shown"), [
    ("chatcmpl-9Qx7ZkY2", True),                       # OpenAI
    ("msg_01XFDUDYJgAACzvnptvVoYEL", True),             # Anthropic
    ("3f2b6c1e-8d4a-4b7e-9a51-2c0d6e8f7a90", True),     # a UUID x-request-id
    ("req:eu/7.1", True),                               # the whole conservative charset
    ("x" * 100, True),
    ("x" * 101, False),                                 # too long for an exemplar label
    ('id"} 1 # {evil="1', False),                       # would break the exposition
    ("id with spaces", False),
    ("ünïcode", False),
    (KEY, False),                                       # a server echoing the key
    (f"req-{KEY[8:28]}", False),                        # ... or 20 characters of it
    ("", False),
])
def test_exemplar_takes_only_safe_response_ids(response_id, shown) -> None:
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest

    from exporter.log import Redactor

    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, make_config(), redactor=Redactor([KEY]))
    metrics.record(success(response_id=response_id))
    page = om_latest(registry).decode()
    assert (f'# {{response_id="{response_id}"}}' in page) is shown
    assert page.count("# {") == (2 if shown else 0)  # ttft and duration
    assert KEY[8:20] not in page


@pytest.mark.parametrize("family", list(DEFAULT_BUCKETS))
def test_default_buckets_are_sorted(family) -> None:
    edges = DEFAULT_BUCKETS[family]
    assert list(edges) == sorted(set(edges))


def test_exposition_size_per_series_is_bounded() -> None:
    """Keep the page small: it is rendered on every scrape for every series."""
    registry = CollectorRegistry()
    config = make_config(models=[f"model-{i}" for i in range(20)])
    metrics = ExporterMetrics(registry, config)
    for i in range(20):
        metrics.record(success(model=f"model-{i}"))
    size = len(generate_latest(registry)) / 20
    assert size < 32_000, f"{size:.0f} bytes per series"


def _lines(page: bytes) -> list[str]:
    return sorted(line for line in page.decode().splitlines() if line)


@pytest.mark.parametrize("openmetrics", [False, True])
def test_incremental_renderer_matches_the_library(openmetrics) -> None:
    """The fast renderer and prometheus_client's renderer produce the same page."""
    from prometheus_client import generate_latest as text_latest
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest

    registry = CollectorRegistry()
    config = make_config(models=("m", 'odd"model\\x'), global_={"labels": {"location": "eu"}},
                         target={"prices": {"m": {"input": 1, "output": 2}}},
                         probe={"expect": {"contains": "x"}})
    metrics = ExporterMetrics(registry, config)
    metrics.record(success(ratelimit={"tokens": 1e6}, cost=0.5, currency="USD", checked=True))
    metrics.record(success(model='odd"model\\x', result=Result.HTTP_5XX))
    metrics.record_skip(("t", "m", "short"), "overlap")
    metrics.observe_lag(0.002)
    first = metrics.render(openmetrics)
    library = (om_latest if openmetrics else text_latest)(registry)
    assert _lines(first) == _lines(library)
    metrics.record(success(response_id="chatcmpl-2"))  # cached blocks refresh after a change
    assert _lines(metrics.render(openmetrics)) == _lines(
        (om_latest if openmetrics else text_latest)(registry))
    assert metrics.render(openmetrics) != first

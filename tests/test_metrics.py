"""ExporterMetrics on its own registry: series from start-up, recording, objectives, removal."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.errors import Result
from exporter.exposition.families import (
    BY_KEY,
    PROCESS_FAMILIES,
    Family,
    Objective,
    Scope,
    SkipReason,
    families,
)
from exporter.exposition.metrics import ExporterMetrics
from exporter.result import (
    Phase,
    ProbeResult,
    ServerPhase,
    Timings,
    TokenSource,
    TokenType,
    Usage,
)
from tests.conftest import make_config

LABELS = {"target": "t", "model": "m", "probe": "short"}
NAME = {key: spec.name for key, spec in BY_KEY.items()}


def success(**kw) -> ProbeResult:
    timings = Timings(ttft=0.25, time_to_first_answer=0.4, tpot=0.02, tps=30.0, duration=1.2,
                      inter_chunk=(0.02, 0.03), phases={Phase.WAIT: 0.01, Phase.GENERATE: 0.9})
    defaults = dict(target="t", model="m", probe="short", result=Result.SUCCESS,
                    timings=timings, usage=Usage(prompt=10, completion=36, reasoning=4, cached=2),
                    output_tokens=36, token_source=TokenSource.USAGE, finished_at=1700000000.0,
                    response_id="chatcmpl-abc")
    return ProbeResult(**{**defaults, **kw})


def metrics_for(config, **kw) -> tuple[ExporterMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return ExporterMetrics(registry, config, **kw), registry


def test_every_series_exists_before_its_first_probe() -> None:
    _, registry = metrics_for(make_config(models=("m", "n")))
    for model in ("m", "n"):
        labels = {**LABELS, "model": model}
        for result in Result:
            assert registry.get_sample_value(
                "llm_probe_requests_total", {**labels, "result": result.value}) == 0
        for token_type in TokenType:
            assert registry.get_sample_value(
                "llm_probe_tokens_total", {**labels, "type": token_type.value}) == 0
        for reason in SkipReason:
            assert registry.get_sample_value(
                "llm_probe_skipped_total", {**labels, "reason": reason.value}) == (
                None if reason is SkipReason.UNSUPPORTED else 0)  # only where claimed
        assert registry.get_sample_value("llm_probe_estimated_tokens_total", labels) == 0
        assert registry.get_sample_value("llm_probe_ttft_seconds_count", labels) == 0
        assert registry.get_sample_value(
            "llm_probe_phase_seconds_count", {**labels, "phase": "generate"}) == 0
        assert registry.get_sample_value("llm_probe_interval_seconds", labels) == 1.0
    page = generate_latest(registry).decode()
    assert "_created" not in page
    # No objective configured: no objective children; no server timings reported yet.
    for family in (Family.OBJECTIVE_SECONDS, Family.OBJECTIVE_RATIO, Family.OBJECTIVE_MET,
                   Family.SERVER_DURATION, Family.RATELIMIT_REQUESTS):
        assert f"\n{NAME[family]}" not in page.replace("# HELP", "").replace("# TYPE", "")


def test_record_success() -> None:
    metrics, registry = metrics_for(make_config())
    metrics.record(success())
    get = registry.get_sample_value
    assert get("llm_probe_requests_total", {**LABELS, "result": "success"}) == 1
    assert get("llm_probe_ttft_seconds_sum", LABELS) == 0.25
    assert get("llm_probe_ttft_seconds_bucket", {**LABELS, "le": "0.25"}) == 1  # le: inclusive
    assert get("llm_probe_time_to_first_answer_seconds_sum", LABELS) == 0.4
    assert get("llm_probe_tpot_seconds_sum", LABELS) == 0.02
    assert get("llm_probe_output_tokens_per_second_sum", LABELS) == 30.0
    assert get("llm_probe_duration_seconds_sum", LABELS) == 1.2
    assert get("llm_probe_inter_chunk_seconds_count", LABELS) == 2
    assert get("llm_probe_phase_seconds_sum", {**LABELS, "phase": "generate"}) == 0.9
    # prompt 10 with 2 cached, completion 36 with 4 reasoning: disjoint types.
    for kind, count in (("input", 8), ("cached_input", 2), ("output", 32), ("reasoning", 4)):
        assert get("llm_probe_tokens_total", {**LABELS, "type": kind}) == count
    assert get("llm_probe_estimated_tokens_total", LABELS) == 0
    assert get("llm_probe_success", LABELS) == 1
    assert get("llm_probe_last_run_timestamp_seconds", LABELS) == 1700000000.0


@pytest.mark.parametrize(("usage", "split"), [
    (Usage(10, 36, 4, 2), (8, 2, 32, 4)),
    (Usage(10, 5), (10, 0, 5, 0)),
    (Usage(), (0, 0, 0, 0)),
    (Usage(prompt=7), (7, 0, 0, 0)),
    (Usage(10, 5, reasoning=5, cached=10), (0, 10, 0, 5)),     # everything cached / thinking
    (Usage(10, 5, reasoning=9, cached=25), (0, 10, 0, 5)),     # inconsistent server: clamped
    (Usage(None, 5, reasoning=2, cached=3), (0, 0, 3, 2)),     # cached without a prompt count
    (Usage(4, None, reasoning=3), (4, 0, 0, 0)),               # reasoning without a completion
])
def test_disjoint_tokens_add_up_to_the_usage(usage, split) -> None:
    parts = usage.disjoint()
    assert list(parts) == list(TokenType)
    assert tuple(parts.values()) == split
    assert sum(parts.values()) == (usage.prompt or 0) + (usage.completion or 0)


def test_sum_of_tokens_total_is_the_usage_total() -> None:
    metrics, registry = metrics_for(make_config())
    usages = [Usage(10, 36, 4, 2), Usage(120, 7, None, 100), Usage(3, 9, 12, 9), Usage(5, 0)]
    for usage in usages:
        metrics.record(success(usage=usage, output_tokens=usage.completion or 0))
    total = sum(registry.get_sample_value("llm_probe_tokens_total", {**LABELS, "type": t})
                for t in TokenType)
    assert total == sum((u.prompt or 0) + (u.completion or 0) for u in usages)


def test_estimated_output_tokens_are_counted() -> None:
    metrics, registry = metrics_for(make_config())
    metrics.record(success())
    metrics.record(success(usage=Usage(prompt=10, completion=20), output_tokens=20,
                           token_source=TokenSource.ESTIMATE))
    assert registry.get_sample_value("llm_probe_estimated_tokens_total", LABELS) == 20
    assert registry.get_sample_value("llm_probe_tokens_total", {**LABELS, "type": "output"}) \
        == 32 + 20


def test_failed_probe_counts_but_does_not_pollute_latency() -> None:
    metrics, registry = metrics_for(make_config())
    metrics.record(success(result=Result.TIMEOUT, ratelimit={"requests": 0.0, "tokens": 5e4}))
    get = registry.get_sample_value
    assert get("llm_probe_requests_total", {**LABELS, "result": "timeout"}) == 1
    assert get("llm_probe_ttft_seconds_count", LABELS) == 0
    assert get("llm_probe_success", LABELS) == 0
    assert get("llm_probe_ratelimit_remaining_requests", LABELS) == 0.0
    assert get("llm_probe_ratelimit_remaining_tokens", LABELS) == 5e4


def test_server_timings_appear_where_the_server_reports_them() -> None:
    metrics, registry = metrics_for(make_config(models=("m", "n")))
    metrics.record(success(server_timings={ServerPhase.PREFILL: 0.08, ServerPhase.TOTAL: 1.1}))
    metrics.record(success(model="n"))
    get = registry.get_sample_value
    assert get("llm_probe_server_duration_seconds_sum", {**LABELS, "phase": "prefill"}) == 0.08
    assert get("llm_probe_server_duration_seconds_count", {**LABELS, "phase": "total"}) == 1
    assert get("llm_probe_server_duration_seconds_count", {**LABELS, "phase": "decode"}) is None
    assert get("llm_probe_server_duration_seconds_count",
               {**LABELS, "model": "n", "phase": "total"}) is None


def test_reload_removes_dropped_series_and_keeps_counters() -> None:
    metrics, registry = metrics_for(make_config(models=("m", "n")))
    metrics.record(success())
    metrics.apply(make_config(models=("m",)))
    get = registry.get_sample_value
    assert get("llm_probe_requests_total", {**LABELS, "result": "success"}) == 1
    assert get("llm_probe_requests_total", {**LABELS, "model": "n", "result": "success"}) is None
    assert get("llm_probe_ttft_seconds_count", {**LABELS, "model": "n"}) is None
    metrics.record(success(model="n"))  # a probe of a removed series finishing late
    assert get("llm_probe_ttft_seconds_count", {**LABELS, "model": "n"}) is None


def test_global_labels_and_bucket_override() -> None:
    config = make_config(global_={"labels": {"location": "eu-west"},
                                  "buckets": {"ttft": [0.1, 1.0], "event_loop_lag": [0.5]}})
    metrics, registry = metrics_for(config)
    metrics.record(success())
    metrics.event_loop_lag.observe(0.2)
    labels = {**LABELS, "location": "eu-west"}
    assert registry.get_sample_value("llm_probe_ttft_seconds_bucket",
                                     {**labels, "le": "1.0"}) == 1
    assert registry.get_sample_value("llm_probe_ttft_seconds_bucket",
                                     {**labels, "le": "0.3"}) is None
    assert registry.get_sample_value("llm_probe_event_loop_lag_seconds_bucket",
                                     {"le": "0.5"}) == 1


@pytest.mark.parametrize("reason", [r for r in SkipReason if r is not SkipReason.UNSUPPORTED])
def test_every_skip_reason_can_be_recorded_for_every_series(reason) -> None:
    metrics, registry = metrics_for(make_config(models=("m", "n")))
    for model in ("m", "n"):
        metrics.record_skip(("t", model, "short"), reason)
        assert registry.get_sample_value(
            "llm_probe_skipped_total", {**LABELS, "model": model, "reason": reason.value}) == 1


def test_a_series_the_gateway_claims_unsupported_has_the_unsupported_child() -> None:
    """Only a configured model the gateway says cannot serve the probe gets the child."""
    import dataclasses

    from exporter.providers.gateway import GatewayModel, Mode

    config = make_config(models=("m", "n"))
    config = dataclasses.replace(config, series=tuple(
        dataclasses.replace(s, gateway=GatewayModel(s.model, mode=Mode.EMBEDDING))
        if s.model == "m" else s for s in config.series))
    metrics, registry = metrics_for(config)
    unsupported = {**LABELS, "reason": SkipReason.UNSUPPORTED.value}
    assert registry.get_sample_value("llm_probe_skipped_total",
                                     {**unsupported, "model": "m"}) == 0
    assert registry.get_sample_value("llm_probe_skipped_total",
                                     {**unsupported, "model": "n"}) is None
    metrics.record_skip(("t", "m", "short"), SkipReason.UNSUPPORTED)
    assert registry.get_sample_value("llm_probe_skipped_total",
                                     {**unsupported, "model": "m"}) == 1


# -- objectives ---------------------------------------------------------------------------------

TWO_MODELS = dict(
    models=("chat", "reasoner"),
    global_={"slo": {"ttft": "500ms", "duration": "30s", "availability": "99.5%"}},
    target={"model_slo": {"reasoner": {"ttft": "4s", "availability": 0.99}}},
)


def test_two_models_with_different_objectives() -> None:
    metrics, registry = metrics_for(make_config(**TWO_MODELS))
    get = registry.get_sample_value
    chat, reasoner = ({**LABELS, "model": m} for m in ("chat", "reasoner"))
    objective = "llm_probe_objective_seconds"
    assert get(objective, {**chat, "objective": "ttft"}) == 0.5
    assert get(objective, {**reasoner, "objective": "ttft"}) == 4.0
    assert get(objective, {**chat, "objective": "duration"}) == 30.0
    assert get(objective, {**chat, "objective": "tpot"}) is None  # only configured ones
    assert get("llm_probe_objective_ratio", {**chat, "objective": "availability"}) == 0.995
    assert get("llm_probe_objective_ratio", {**reasoner, "objective": "availability"}) == 0.99
    for ttft in (0.3, 0.5, 0.9, 3.0):  # at or below 500 ms: two; at or below 4 s: all four
        metrics.record(success(model="chat", timings=Timings(ttft=ttft, duration=5.0)))
        metrics.record(success(model="reasoner", timings=Timings(ttft=ttft, duration=5.0)))
    metrics.record(success(model="chat", result=Result.TIMEOUT))  # not an observation
    met = "llm_probe_objective_met_total"
    assert get(met, {**chat, "objective": "ttft"}) == 2
    assert get(met, {**reasoner, "objective": "ttft"}) == 4
    assert get(met, {**chat, "objective": "duration"}) == 4
    assert get(met, {**chat, "objective": "tpot"}) is None
    assert get("llm_probe_ttft_seconds_count", chat) == 4
    # Each objective is an `le` edge of every series, and the bucket agrees with the counter.
    for labels in (chat, reasoner):
        for edge in ("0.5", "4.0"):
            assert get("llm_probe_ttft_seconds_bucket", {**labels, "le": edge}) is not None
    assert get("llm_probe_ttft_seconds_bucket", {**chat, "le": "0.5"}) == 2
    assert get("llm_probe_ttft_seconds_bucket", {**reasoner, "le": "4.0"}) == 4


def test_reload_follows_the_objectives() -> None:
    metrics, registry = metrics_for(make_config(**TWO_MODELS))
    metrics.apply(make_config(models=("chat", "reasoner"),
                              global_={"slo": {"tpot": "50ms"}}))
    get = registry.get_sample_value
    chat = {**LABELS, "model": "chat"}
    assert get("llm_probe_objective_seconds", {**chat, "objective": "ttft"}) is None
    assert get("llm_probe_objective_met_total", {**chat, "objective": "ttft"}) is None
    assert get("llm_probe_objective_ratio", {**chat, "objective": "availability"}) is None
    assert get("llm_probe_objective_seconds", {**chat, "objective": "tpot"}) == 0.05
    assert get("llm_probe_objective_met_total", {**chat, "objective": "tpot"}) == 0
    assert get("llm_probe_ttft_seconds_bucket", {**chat, "le": "4.0"}) is None


@pytest.mark.parametrize("objective", list(Objective))
def test_an_objective_at_exactly_the_value_is_met(objective) -> None:
    config = make_config(global_={"slo": {objective.value: "200ms"}})
    metrics, registry = metrics_for(config)
    metrics.record(success(timings=Timings(ttft=0.2, tpot=0.2, duration=0.2)))
    metrics.record(success(timings=Timings(ttft=0.2001, tpot=0.2001, duration=0.2001)))
    assert registry.get_sample_value("llm_probe_objective_met_total",
                                     {**LABELS, "objective": objective.value}) == 1
    name = BY_KEY[Family(objective.value)].name
    assert registry.get_sample_value(f"{name}_bucket", {**LABELS, "le": "0.2"}) == 1


# -- the page -----------------------------------------------------------------------------------

def test_own_metrics_come_from_the_declaration_with_process_metrics() -> None:
    metrics, _ = metrics_for(make_config())
    page = metrics.render().decode()
    served = {f.name for f in text_string_to_metric_families(page)}
    declared = {spec.name for spec in families(Scope.EXPORTER)}
    http = {BY_KEY[f].name for f in (Family.HTTP_CONNECTIONS, Family.HTTP_CONNECTIONS_LIMIT,
                                     Family.HTTP_CONNECTIONS_CLOSED,  # the server adds these
                                     Family.WEB_CONFIG_RELOAD_OK)}  # (with a web config)
    budget = {BY_KEY[f].name for f in (Family.BUDGET_SPENT, Family.BUDGET_LIMIT)}
    assert declared - http - budget <= served
    assert {name.removesuffix("_total") for name in PROCESS_FAMILIES} <= served
    unknown = served - {spec.name for spec in families(Scope.PROBE)} - declared - {
        name.removesuffix("_total") for name in PROCESS_FAMILIES}
    assert not unknown


def test_the_exporter_changes_no_process_wide_state() -> None:
    metrics_for(make_config())
    registry = CollectorRegistry()
    Counter("unrelated", "Another library's counter.", registry=registry).inc()
    assert registry.get_sample_value("unrelated_created") is not None


def test_restricted_page_keeps_only_the_named_families() -> None:
    metrics, _ = metrics_for(make_config())
    metrics.record(success())
    names = ["llm_probe_requests_total", "llm_probe_in_flight", "llm_probe_ttft_seconds_count"]
    page = generate_latest(metrics.restricted(names)).decode()
    samples = {s.name for f in text_string_to_metric_families(page) for s in f.samples}
    assert samples == set(names)


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

    metrics, registry = metrics_for(make_config(), redactor=Redactor([KEY]))
    metrics.record(success(response_id=response_id))
    page = om_latest(registry).decode()
    assert (f'# {{response_id="{response_id}"}}' in page) is shown
    assert page.count("# {") == (2 if shown else 0)  # ttft and duration
    assert KEY[8:20] not in page


def test_exposition_size_per_series_is_bounded() -> None:
    """Keep the page small: it is rendered on every scrape for every series."""
    config = make_config(models=[f"model-{i}" for i in range(20)])
    metrics, registry = metrics_for(config)
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

    config = make_config(models=("m", 'odd"model\\x'), global_={"labels": {"location": "eu"}},
                         target={"prices": {"m": {"input": 1, "output": 2}},
                                 "slo": {"ttft": "1s", "availability": "99%"}},
                         probe={"expect": {"contains": "x"}})
    metrics, registry = metrics_for(config, process_metrics=False)
    metrics.record(success(ratelimit={"tokens": 1e6}, cost=0.5, currency="USD", checked=True,
                           server_timings={ServerPhase.DECODE: 0.7}))
    metrics.record(success(model='odd"model\\x', result=Result.HTTP_5XX))
    metrics.record_skip(("t", "m", "short"), SkipReason.OVERLAP)
    metrics.observe_lag(0.002)
    first = metrics.render(openmetrics)
    library = (om_latest if openmetrics else text_latest)(registry)
    assert _lines(first) == _lines(library)
    metrics.record(success(response_id="chatcmpl-2"))  # cached blocks refresh after a change
    assert _lines(metrics.render(openmetrics)) == _lines(
        (om_latest if openmetrics else text_latest)(registry))
    assert metrics.render(openmetrics) != first


def test_text_renders_in_another_thread_are_always_valid_histograms() -> None:
    """The thread contract of `exposition`: the loop records while scrapes render."""
    import sys

    metrics, _ = metrics_for(make_config(), process_metrics=False)
    done = threading.Event()
    problems: list[str] = []
    pages = [0]

    def render() -> None:
        while not done.is_set():
            page = metrics.render().decode()
            pages[0] += 1
            for family in text_string_to_metric_families(page):
                if family.type != "histogram":
                    continue
                buckets: dict[tuple, list[float]] = {}
                counts: dict[tuple, float] = {}
                for s in family.samples:
                    labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                    if s.name.endswith("_bucket"):
                        buckets.setdefault(labels, []).append(s.value)
                    elif s.name.endswith("_count"):
                        counts[labels] = s.value
                for labels, values in buckets.items():
                    if values != sorted(values) or values[-1] != counts[labels]:
                        problems.append(f"{family.name} {labels}: {values} / {counts[labels]}")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    thread = threading.Thread(target=render)
    thread.start()
    try:
        for i in range(3000):
            metrics.record(success(timings=Timings(
                ttft=0.01 * (i % 300), tpot=0.001 * (i % 50), duration=0.1 * (i % 100),
                inter_chunk=tuple(0.001 * j for j in range(i % 7)),
                phases={Phase.WAIT: 0.001 * (i % 40)})))
    finally:
        done.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert pages[0] > 1
    assert not problems, problems[:3]

"""The scheduler: intervals, no overlap, global concurrency, reload, graceful stop."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time

import pytest
from prometheus_client import CollectorRegistry

from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.prober import Prober
from exporter.serve.results import ResultStore
from exporter.serve.scheduler import Scheduler, first_probe_window, first_ticks
from tests.conftest import Script, chat_chunk, make_config, ok_stream

LABELS = {"target": "t", "model": "m", "probe": "short"}


def slow_stream(seconds: float) -> Script:
    script = ok_stream(["Hi"], usage={"prompt_tokens": 3, "completion_tokens": 1})
    return Script([(seconds, chat_chunk(role="assistant", content="")), *script.steps[1:]])


async def run_for(config, seconds: float, **kw):
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    store = ResultStore()
    store.set_series(s.key for s in config.series)
    async with Prober() as prober:
        scheduler = Scheduler(prober, metrics, store,
                              max_concurrency=config.global_.max_concurrency, **kw)
        scheduler.apply(config)
        await asyncio.sleep(seconds)
        await scheduler.stop(grace=5)
    return registry, store


async def test_series_run_on_their_interval(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi"]))
    config = make_config(server.url, global_={"interval": "100ms", "jitter": 0})
    registry, _ = await run_for(config, 1.05)
    count = registry.get_sample_value("llm_probe_requests_total", {**LABELS, "result": "success"})
    # One per 100 ms tick: never more than the 11 ticks; a loaded machine starts late and may
    # miss a few (a tick is skipped, not caught up), never as few as a 1 s interval's 1–2.
    assert 6 <= count <= 11
    assert registry.get_sample_value("llm_probe_scheduler_lag_seconds_count") == count


async def test_a_series_never_overlaps_itself(scripted_server) -> None:
    server = await scripted_server(slow_stream(0.35))
    config = make_config(server.url, global_={"interval": "100ms", "jitter": 0})
    registry, _ = await run_for(config, 1.0)
    skipped = registry.get_sample_value("llm_probe_skipped_total", {**LABELS, "reason": "overlap"})
    assert skipped >= 4
    starts = [r for r in server.requests]
    assert len(starts) <= 4


async def test_global_max_concurrency(scripted_server) -> None:
    in_flight = {"now": 0, "max": 0}
    server = await scripted_server(slow_stream(0.2))
    config = make_config(server.url, models=[f"m{i}" for i in range(4)],
                         global_={"interval": "1s", "jitter": 0, "max_concurrency": 2})
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    store = ResultStore()
    store.set_series(s.key for s in config.series)
    async with Prober() as prober:
        scheduler = Scheduler(prober, metrics, store, max_concurrency=2)
        scheduler.apply(config)
        for _ in range(40):
            gauge = registry.get_sample_value("llm_probe_in_flight")
            in_flight["max"] = max(in_flight["max"], gauge)
            await asyncio.sleep(0.025)
        await scheduler.stop(grace=5)
    assert in_flight["max"] == 2
    total = sum(registry.get_sample_value("llm_probe_requests_total", {
        **LABELS, "model": f"m{i}", "result": "success"}) for i in range(4))
    assert total == 4


async def test_retry_after_pauses_the_series(scripted_server) -> None:
    limited = Script(status=429, headers={"Retry-After": "30"}, steps=[(0, b"{}")])
    server = await scripted_server(limited)
    config = make_config(server.url, global_={"interval": "100ms", "jitter": 0})
    registry, _ = await run_for(config, 0.55)
    assert registry.get_sample_value(
        "llm_probe_requests_total", {**LABELS, "result": "rate_limited"}) == 1
    assert registry.get_sample_value(
        "llm_probe_skipped_total", {**LABELS, "reason": "rate_limited"}) >= 3


async def test_stop_lets_in_flight_probes_finish(scripted_server) -> None:
    server = await scripted_server(slow_stream(0.3))
    config = make_config(server.url, global_={"interval": "1s", "jitter": 0})
    # Stop 50 ms after the first probe started, while the server still holds it.
    registry, store = await run_for(config, 0.05 + config.series[0].stable_fraction())
    assert registry.get_sample_value(
        "llm_probe_requests_total", {**LABELS, "result": "success"}) == 1
    assert store.latest(("t", "m", "short")).success


async def test_apply_removes_and_adds_series(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi"]))
    config = make_config(server.url, models=("a", "b"),
                         global_={"interval": "100ms", "jitter": 0})
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    store = ResultStore()
    async with Prober() as prober:
        scheduler = Scheduler(prober, metrics, store)
        scheduler.apply(config)
        await asyncio.sleep(0.3)
        smaller = make_config(server.url, models=("a",), global_={"interval": "100ms",
                                                                  "jitter": 0})
        metrics.apply(smaller)
        scheduler.apply(smaller)
        await asyncio.sleep(0.05)
        before = len([r for r in server.requests if r["json"]["model"] == "b"])
        await asyncio.sleep(0.4)
        after = len([r for r in server.requests if r["json"]["model"] == "b"])
        await scheduler.stop()
    assert before == after  # b is no longer probed
    assert registry.get_sample_value("llm_probe_requests_total", {
        **LABELS, "model": "b", "result": "success"}) is None


@pytest.mark.parametrize(("interval", "fraction", "first", "grid"), [
    (1.0, 0.5, 0.5, 1.5),  # short intervals: the first probe is on the grid
    (60.0, 0.5, 5.0, 30.0),  # within 10 s, then the grid (30 s, 90 s, …)
    (60.0, 0.01, 0.1, 60.6),  # a grid tick too close to the first probe is skipped
    (300.0, 0.9, 9.0, 270.0),
    (300.0, 0.02, 0.2, 306.0),
    (10.0, 0.0, 0.0, 10.0),
])
def test_first_probe_within_ten_seconds_then_the_grid(interval, fraction, first, grid) -> None:
    assert first_ticks(100.0, interval, fraction) == pytest.approx((100 + first, 100 + grid))


@pytest.mark.parametrize(("series", "window"), [(1, 10.0), (2500, 10.0), (5000, 20.0),
                                               (10000, 40.0)])
def test_a_large_plan_spreads_its_first_probes_at_250_per_second(series, window) -> None:
    assert first_probe_window(series) == window
    # 5,000 series with a 30 s interval: the first probes over 20 s, then the grid.
    first, grid = first_ticks(100.0, 30.0, 0.75, first_probe_window(series))
    assert first == pytest.approx(100 + 0.75 * min(30.0, window))
    assert grid - first >= min(30.0, window)


async def test_a_long_interval_series_probes_soon_after_start(scripted_server) -> None:
    server = await scripted_server(ok_stream(["Hi"]))
    # m44's stable offset is 0.017: 0.17 s into the 10 s window (5.1 s into a 5 min grid).
    config = make_config(server.url, models=["m44"], global_={"interval": "5m", "jitter": 0})
    registry, _ = await run_for(config, 0.8)
    assert registry.get_sample_value("llm_probe_requests_total", {
        **LABELS, "model": "m44", "result": "success"}) == 1


async def test_retry_after_pause_ignores_wall_clock_steps(scripted_server) -> None:
    """A backward wall-clock step (NTP, VM resume) must not stretch a Retry-After pause."""
    limited = Script(status=429, headers={"Retry-After": "1"}, steps=[(0, b"{}")])
    server = await scripted_server(limited, ok_stream(["Hi"]))
    config = make_config(server.url, global_={"interval": "100ms", "jitter": 0})
    calls = itertools.count()

    def stepping_wall() -> float:  # two hours back after the first reading
        return time.time() - (7200 if next(calls) else 0)

    registry, _ = await run_for(config, 1.6, wall_clock=stepping_wall)
    assert registry.get_sample_value(
        "llm_probe_requests_total", {**LABELS, "result": "rate_limited"}) == 1
    assert registry.get_sample_value(
        "llm_probe_skipped_total", {**LABELS, "reason": "rate_limited"}) >= 5
    assert registry.get_sample_value(
        "llm_probe_requests_total", {**LABELS, "result": "success"}) >= 1


class RecordingLogger:
    """Keeps (level, event, fields) of every log call."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict]] = []

    def __getattr__(self, level: str):
        return lambda event, **kw: self.lines.append((level, event, kw))


async def test_logs_follow_state_changes_not_probes(scripted_server) -> None:
    failing = Script(status=500, headers={}, steps=[(0, b"oops")])
    denied = Script(status=401, headers={}, steps=[(0, b"bad key")])
    server = await scripted_server(ok_stream(["Hi"]), failing, failing, failing, denied,
                                   ok_stream(["Hi"]))
    config = make_config(server.url, global_={"interval": "100ms", "jitter": 0})
    log = RecordingLogger()
    await run_for(config, 0.75, logger=log)
    probe_lines = [(level, event, kw.get("result")) for level, event, kw in log.lines
                   if event.startswith("probe")]
    assert probe_lines[:6] == [
        ("debug", "probe finished", None),
        ("warning", "probe failing", "http_5xx"),
        ("debug", "probe failed again", "http_5xx"),
        ("debug", "probe failed again", "http_5xx"),
        ("warning", "probe failing", "auth"),
        ("info", "probe recovered", None),
    ]
    recovered = next(kw for _l, event, kw in log.lines if event == "probe recovered")
    assert recovered["previous"] == "auth" and recovered["failures"] == 4


async def test_a_bug_in_one_tick_never_ends_the_series_loop(scripted_server) -> None:
    """A failing tick (say, a skip reason the metrics do not know) loses that tick only."""
    server = await scripted_server(ok_stream(["Hi"]))
    config = make_config(server.url, global_={"interval": "100ms", "jitter": 0})
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    store = ResultStore()
    store.set_series(s.key for s in config.series)
    logged: list[str] = []

    class Log:
        def __getattr__(self, level: str):
            return lambda event, **_kw: logged.append(event)

    async with Prober() as prober:
        scheduler = Scheduler(prober, metrics, store, logger=Log())
        calls = itertools.count()
        real = scheduler.skip_reason

        def flaky(series):
            if next(calls) < 3:
                metrics.record_skip(series.key, "no-such-reason")  # type: ignore[arg-type]
            return real(series)

        scheduler.skip_reason = flaky  # type: ignore[method-assign]
        scheduler.apply(config)
        await asyncio.sleep(1.0)
        await scheduler.stop(grace=5)
    assert logged.count("series tick failed") == 3
    count = registry.get_sample_value("llm_probe_requests_total", {**LABELS, "result": "success"})
    assert count >= 5


async def test_a_discovered_series_spreads_its_first_probe_over_its_interval(
        scripted_server) -> None:
    """Issue 36: a gateway listing many new names at once must not make them all probe within
    seconds. m18 and m38 have stable offsets of ~0.05: added later with a 60 s interval, a
    configured series probes ~0.5 s after (within the 10 s window), a discovered one ~3 s."""
    server = await scripted_server(ok_stream(["Hi"]))
    first = make_config(server.url, models=["m0"], global_={"interval": "60s", "jitter": 0})
    later = make_config(server.url, models=["m0", "m18", "m38"],
                        global_={"interval": "60s", "jitter": 0})
    later = dataclasses.replace(later, series=tuple(
        dataclasses.replace(s, discovered=s.model == "m38") for s in later.series))
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, later)
    async with Prober() as prober:
        scheduler = Scheduler(prober, metrics, ResultStore(), max_concurrency=4)
        scheduler.apply(first)
        scheduler.apply(later)
        await asyncio.sleep(1.2)
        await scheduler.stop(grace=5)

    def probes(model: str) -> float | None:
        return registry.get_sample_value("llm_probe_requests_total", {
            **LABELS, "model": model, "result": "success"})
    assert probes("m18") == 1
    assert probes("m38") == 0  # its child exists from the start, unprobed

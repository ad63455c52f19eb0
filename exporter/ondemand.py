"""`/probe`'s answer: blackbox-style `llm_probe_ondemand_*` gauges, its deadline and shard hints.

The families have names of their own, so none is served with another type on `/metrics`, and
carry every probe label (target, model, probe and the global labels).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Gauge

from exporter.config import Config, Series
from exporter.errors import Result
from exporter.result import ProbeResult, TokenSource
from exporter.shard import parse_shard, shard_of

SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"


def probe_deadline(timeout: float, scrape_timeout: str | None, margin: float) -> float:
    """An on-demand probe's deadline: its timeout, capped by the scraper's minus a margin."""
    try:
        scrape = float(scrape_timeout) if scrape_timeout is not None else math.nan
    except ValueError:
        scrape = math.nan
    if not math.isfinite(scrape) or scrape <= 0:
        return timeout
    return min(timeout, max(scrape - margin, scrape / 2))


def owning_shard(config: Config, key: tuple[str, str, str], shard: str | None) -> str | None:
    """`i/n` of the replica that probes a configured series this replica does not own."""
    spec = shard or config.global_.shard
    if spec is None:
        return None
    target, model, probe = key
    if not any(t.name == target and model in t.models and probe in t.probes
               for t in config.targets):
        return None
    count = parse_shard(spec)[1]
    return f"{shard_of(key, count)}/{count}"


def ondemand_registry(series: Series, constant: Mapping[str, str], result: ProbeResult | None,
                      *, cached: bool = False, skipped: str | None = None) -> CollectorRegistry:
    """A one-off registry answering `/probe` (blackbox style): `llm_probe_ondemand_*` gauges.

    Every family carries the probe labels (target, model, probe and the global labels) and a
    name of its own, so none clashes with a `/metrics` family of another type.
    """
    registry = CollectorRegistry()
    label_names = ["target", "model", "probe", *constant]
    label_values = [*series.key, *constant.values()]

    def put(name: str, doc: str, value: float | None, **extra: str) -> None:
        if value is None:
            return
        gauge = Gauge(f"llm_probe_ondemand_{name}", doc, [*label_names, *extra],
                      registry=registry)
        gauge.labels(*label_values, *extra.values()).set(value)

    if skipped is not None:
        put("skipped", "1: no request was sent: budget (the daily budget is spent) or "
            "rate_limited (the provider's Retry-After is running).", 1, reason=skipped)
    if result is None:
        return registry
    t = result.timings
    put("success", "Whether the probe succeeded (1/0).", 1 if result.success else 0)
    outcome = Gauge("llm_probe_ondemand_result", "The probe's result (1 for its value).",
                    [*label_names, "result"], registry=registry)
    for value in Result:
        outcome.labels(*label_values, value.value).set(1 if value is result.result else 0)
    put("ttft_seconds", "Time to first token: t_first - t0.", t.ttft)
    put("time_to_first_answer_seconds", "Time to the first answer (non-reasoning) token.",
        t.time_to_first_answer)
    put("tpot_seconds", "Time per output token: (t_last - t_first) / (N - 1).", t.tpot)
    put("output_tokens_per_second", "Output tokens per second as the user sees it: N / E2E.",
        t.tps)
    put("duration_seconds", "End-to-end duration: t_end - t0.", t.duration)
    if t.phases:
        phases = Gauge("llm_probe_ondemand_phase_seconds",
                       "Probe phases: resolve, connect, tls, wait, first_token, generate.",
                       [*label_names, "phase"], registry=registry)
        for phase, seconds in t.phases.items():
            phases.labels(*label_values, phase.value).set(seconds)
    put("output_tokens", "Output tokens N (server usage, else estimated).", result.output_tokens)
    put("output_tokens_estimated", "1 when N was estimated (the server sent no usage).",
        1 if result.token_source is TokenSource.ESTIMATE else 0)
    if result.cost is not None:
        put("cost", "Cost of this probe from the configured prices.", result.cost,
            currency=result.currency or "")
    put("http_status_code", "HTTP status of the response.", result.status)
    if result.checked is not None:
        put("check_success", "Whether the answer checks passed (1/0).",
            1 if result.checked else 0)
    put("cached", "1 when this is the series' last result (probed moments ago), not a new call.",
        1 if cached else 0)
    return registry

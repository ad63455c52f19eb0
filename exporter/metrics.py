"""Prometheus metrics: `ExporterMetrics(registry).record(result)`; the one bucket table lives here.

Every probe series' children are created when the config is loaded (so series exist before their
first probe) and removed when a reload drops the series. Children are cached per series, so
recording a result does no label lookups.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from exporter import __version__
from exporter.config import Config, Family, Series
from exporter.errors import Result
from exporter.result import Phase, ProbeResult

# Default bucket edges (seconds unless noted). Compact on purpose: exposition size grows with
# families × buckets × series, and a large /metrics page costs the exporter's own timing.
DEFAULT_BUCKETS: Mapping[Family, tuple[float, ...]] = {
    Family.TTFT: (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 60),
    Family.TIME_TO_FIRST_ANSWER: (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 60),
    Family.TPOT: (0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1),
    Family.INTER_CHUNK: (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    Family.TPS: (1, 5, 10, 20, 30, 50, 75, 100, 150, 200, 400),  # tokens per second
    Family.DURATION: (0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120),
    Family.PHASE: (0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    Family.SCHEDULER_LAG: (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
}
EVENT_LOOP_LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
TOKEN_TYPES = ("prompt", "completion", "reasoning", "cached")
SKIP_REASONS = ("budget", "overlap", "rate_limited")
CHECK_OUTCOMES = ("pass", "fail")
PROBE_LABELS = ("target", "model", "probe")
EXEMPLAR_ID_LIMIT = 100  # OpenMetrics caps an exemplar's labels at 128 characters


@dataclass(slots=True)
class _SeriesChildren:
    """The cached metric children of one probe series."""

    values: tuple[str, ...]
    ttft: object
    ttfa: object
    tpot: object
    inter_chunk: object
    tps: object
    duration: object
    phases: dict[Phase, object]
    requests: dict[Result, object]
    tokens: dict[str, object]
    success: object
    last_run: object
    skipped: dict[str, object]
    cost: dict[str, object] = field(default_factory=dict)
    ratelimit: dict[str, object] = field(default_factory=dict)
    checks: dict[str, object] = field(default_factory=dict)


class ExporterMetrics:
    """All metric families of the exporter on one registry."""

    def __init__(self, registry: CollectorRegistry, config: Config | None = None) -> None:
        # `_created` series double the page for nothing Prometheus needs here.
        disable_created_metrics()
        self.registry = registry
        self._label_names: tuple[str, ...] | None = None
        self._constant: dict[str, str] = {}
        self._series: dict[tuple[str, str, str], _SeriesChildren] = {}
        self._layout: tuple[dict, dict] | None = None
        self.in_flight = Gauge("llm_probe_in_flight", "Probes in flight now.", registry=registry)
        self.scheduler_lag: Histogram | None = None
        self.event_loop_lag = Histogram(
            "llm_probe_event_loop_lag_seconds",
            "How late the event loop wakes a timer; high values mean timings may be skewed.",
            buckets=EVENT_LOOP_LAG_BUCKETS, registry=registry)
        build = Gauge("llm_probe_build_info", "Exporter build information.",
                      ["version", "python_version"], registry=registry)
        build.labels(__version__, platform.python_version()).set(1)
        self.budget_spent = Gauge("llm_probe_budget_spent",
                                  "Spent today (UTC) against global.budget.", ["currency"],
                                  registry=registry)
        self.budget_limit = Gauge("llm_probe_budget_limit",
                                  "global.budget.max_cost_per_day.", ["currency"],
                                  registry=registry)
        self.reload_ok = Gauge("llm_probe_config_last_reload_successful",
                               "Whether the last config load succeeded.", registry=registry)
        self.reload_time = Gauge("llm_probe_config_last_reload_success_timestamp_seconds",
                                 "Unix time of the last successful config load.",
                                 registry=registry)
        if config is not None:
            self.apply(config)

    # -- families ------------------------------------------------------------------------

    def _build_families(self, config: Config) -> None:
        """(Re)create the probe families for the config's label names and buckets."""
        if self._label_names is not None:
            for family in self._families():
                self.registry.unregister(family)
            if self.scheduler_lag is not None:
                self.registry.unregister(self.scheduler_lag)
        self._series.clear()
        labels = (*PROBE_LABELS, *config.global_.labels)
        self._label_names = labels
        self._constant = dict(config.global_.labels)
        buckets = {**DEFAULT_BUCKETS, **config.global_.buckets}
        reg = self.registry

        def histogram(name: str, doc: str, family: Family, extra: Sequence[str] = ()) -> Histogram:
            return Histogram(name, doc, [*labels, *extra], buckets=buckets[family], registry=reg)

        self.ttft = histogram("llm_probe_ttft_seconds",
                              "Time to first token (answer or reasoning): t_first - t0.",
                              Family.TTFT)
        self.ttfa = histogram("llm_probe_time_to_first_answer_seconds",
                              "Time to the first answer (non-reasoning) token.",
                              Family.TIME_TO_FIRST_ANSWER)
        self.tpot = histogram("llm_probe_tpot_seconds",
                              "Time per output token: (t_last - t_first) / (N - 1).", Family.TPOT)
        self.inter_chunk = histogram("llm_probe_inter_chunk_seconds",
                                     "Gaps between consecutive token-bearing chunks.",
                                     Family.INTER_CHUNK)
        self.tps = histogram("llm_probe_output_tokens_per_second",
                             "Output tokens per second as the user sees it: N / E2E.", Family.TPS)
        self.duration = histogram("llm_probe_duration_seconds",
                                  "End-to-end duration of a probe: t_end - t0.", Family.DURATION)
        self.phase = histogram("llm_probe_phase_seconds",
                               "Probe phases: resolve, connect, tls, wait, first_token, generate.",
                               Family.PHASE, ["phase"])
        self.requests = Counter("llm_probe_requests", "Finished probes by result.",
                                [*labels, "result"], registry=reg)
        self.tokens = Counter("llm_probe_tokens", "Tokens by type (from usage, else estimated).",
                              [*labels, "type"], registry=reg)
        self.cost = Counter("llm_probe_cost", "Cost of probes from the configured prices.",
                            [*labels, "currency"], registry=reg)
        self.success = Gauge("llm_probe_success", "Whether the last probe succeeded (1/0).",
                             labels, registry=reg)
        self.last_run = Gauge("llm_probe_last_run_timestamp_seconds",
                              "Unix time the last probe ended.", labels, registry=reg)
        self.ratelimit = Gauge("llm_probe_ratelimit_remaining",
                               "Remaining rate limit reported by the server.",
                               [*labels, "kind"], registry=reg)
        self.skipped = Counter("llm_probe_skipped", "Probes not run, by reason.",
                               [*labels, "reason"], registry=reg)
        self.checks = Counter("llm_probe_checks", "Answer checks by outcome (pass, fail).",
                              [*labels, "outcome"], registry=reg)
        self.interval = Gauge("llm_probe_interval_seconds",
                              "Configured probe interval of the series.", labels, registry=reg)
        self.scheduler_lag = Histogram(
            "llm_probe_scheduler_lag_seconds", "How late probes start versus their schedule.",
            buckets=buckets[Family.SCHEDULER_LAG], registry=reg)

    def _families(self) -> list:
        return [self.ttft, self.ttfa, self.tpot, self.inter_chunk, self.tps, self.duration,
                self.phase, self.requests, self.tokens, self.cost, self.success, self.last_run,
                self.ratelimit, self.skipped, self.checks, self.interval]

    # -- series --------------------------------------------------------------------------

    def apply(self, config: Config) -> None:
        """Create children for every configured series; remove those the config dropped."""
        layout = (dict(config.global_.labels), dict(config.global_.buckets))
        if layout != self._layout:
            # Label names, constant values or buckets changed: the families must be rebuilt.
            self._build_families(config)
            self._layout = layout
        wanted = {s.key: s for s in config.series}
        for key in [k for k in self._series if k not in wanted]:
            self._remove(self._series.pop(key))
        for key, series in wanted.items():
            children = self._series.get(key)
            if children is None:
                children = self._series[key] = self._create(series)
            self._sync_prices(children, series)
            if not children.checks and (series.probe.expect is not None
                                        or any(c.expect for c in series.probe.cases)):
                children.checks = {o: self.checks.labels(*children.values, o)
                                   for o in CHECK_OUTCOMES}
            self.interval.labels(*children.values).set(series.interval)

    def _create(self, series: Series) -> _SeriesChildren:
        values = (*series.key, *self._constant.values())
        has_checks = series.probe.expect is not None or any(c.expect for c in series.probe.cases)
        return _SeriesChildren(
            values=values,
            ttft=self.ttft.labels(*values), ttfa=self.ttfa.labels(*values),
            tpot=self.tpot.labels(*values), inter_chunk=self.inter_chunk.labels(*values),
            tps=self.tps.labels(*values), duration=self.duration.labels(*values),
            phases={p: self.phase.labels(*values, p.value) for p in Phase},
            requests={r: self.requests.labels(*values, r.value) for r in Result},
            tokens={t: self.tokens.labels(*values, t) for t in TOKEN_TYPES},
            success=self.success.labels(*values), last_run=self.last_run.labels(*values),
            skipped={r: self.skipped.labels(*values, r) for r in SKIP_REASONS},
            checks={o: self.checks.labels(*values, o) for o in CHECK_OUTCOMES}
            if has_checks else {},
        )

    def _sync_prices(self, children: _SeriesChildren, series: Series) -> None:
        price = series.price
        currencies = {price.currency} if price else set()
        for currency in [c for c in children.cost if c not in currencies]:
            self.cost.remove(*children.values, currency)
            del children.cost[currency]
        for currency in currencies - children.cost.keys():
            children.cost[currency] = self.cost.labels(*children.values, currency)

    def _remove(self, children: _SeriesChildren) -> None:
        values = children.values
        for family in (self.ttft, self.ttfa, self.tpot, self.inter_chunk, self.tps,
                       self.duration, self.success, self.last_run, self.interval):
            family.remove(*values)
        for phase in children.phases:
            self.phase.remove(*values, phase.value)
        for result in children.requests:
            self.requests.remove(*values, result.value)
        for kind in children.tokens:
            self.tokens.remove(*values, kind)
        for currency in children.cost:
            self.cost.remove(*values, currency)
        for kind in children.ratelimit:
            self.ratelimit.remove(*values, kind)
        for reason in children.skipped:
            self.skipped.remove(*values, reason)
        for outcome in children.checks:
            self.checks.remove(*values, outcome)

    # -- recording -----------------------------------------------------------------------

    def record(self, result: ProbeResult) -> None:
        """Record one finished probe."""
        children = self._series.get(result.key)
        if children is None:  # the series was removed by a reload while it ran
            return
        children.requests[result.result].inc()
        children.success.set(1 if result.success else 0)
        children.last_run.set(result.finished_at)
        for kind, value in result.ratelimit.items():
            gauge = children.ratelimit.get(kind)
            if gauge is None:
                gauge = children.ratelimit[kind] = self.ratelimit.labels(*children.values, kind)
            gauge.set(value)
        if result.checked is not None and children.checks:
            children.checks["pass" if result.checked else "fail"].inc()
        if result.result not in (Result.SUCCESS, Result.CHECK_FAILED):
            return  # latency of a failed probe would pollute the distributions
        t = result.timings
        exemplar = ({"response_id": result.response_id[:EXEMPLAR_ID_LIMIT]}
                    if result.response_id else None)
        if t.ttft is not None:
            children.ttft.observe(t.ttft, exemplar)
        if t.time_to_first_answer is not None:
            children.ttfa.observe(t.time_to_first_answer)
        if t.tpot is not None:
            children.tpot.observe(t.tpot)
        if t.tps is not None:
            children.tps.observe(t.tps)
        if t.duration is not None:
            children.duration.observe(t.duration, exemplar)
        observe_gap = children.inter_chunk.observe
        for gap in t.inter_chunk:
            observe_gap(gap)
        for phase, seconds in t.phases.items():
            children.phases[phase].observe(seconds)
        usage = result.usage
        for kind, count in (("prompt", usage.prompt), ("completion", usage.completion),
                            ("reasoning", usage.reasoning), ("cached", usage.cached)):
            if count:
                children.tokens[kind].inc(count)
        if result.cost and result.currency in children.cost:
            children.cost[result.currency].inc(result.cost)

    def record_skip(self, key: tuple[str, str, str], reason: str) -> None:
        """Count a probe that was not run."""
        children = self._series.get(key)
        if children is not None:
            children.skipped[reason].inc()

    def observe_lag(self, seconds: float) -> None:
        """Record how late a probe started."""
        if self.scheduler_lag is not None:
            self.scheduler_lag.observe(seconds)

    def set_budget(self, budget: Any) -> None:
        """Show the daily budget and today's spend (None clears them)."""
        self.budget_spent.clear()
        self.budget_limit.clear()
        if budget is not None:
            self.budget_spent.labels(budget.currency).set(budget.spent)
            self.budget_limit.labels(budget.currency).set(budget.limit)

    def reload_status(self, ok: bool, when: float | None = None) -> None:
        """Record the outcome of a config (re)load."""
        self.reload_ok.set(1 if ok else 0)
        if ok and when is not None:
            self.reload_time.set(when)

    def series_keys(self) -> Iterable[tuple[str, str, str]]:
        """Keys of the series that have children now."""
        return self._series.keys()

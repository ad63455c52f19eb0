"""Prometheus metrics: `ExporterMetrics(registry).record(result)`; the one bucket table lives here.

Every probe series' children are created when the config is loaded (so series exist before their
first probe) and removed when a reload drops the series. Probe families live in a
`ProbeCollector` (incremental rendering, see `exposition`); the exporter's own few metrics are
ordinary prometheus_client objects in a small registry of their own.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, disable_created_metrics
from prometheus_client import generate_latest as text_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from exporter import __version__, protobuf
from exporter.config import Config, Family, Series
from exporter.errors import Result
from exporter.exposition import (
    FamilySpec,
    NativeSettings,
    ProbeCollector,
    SeriesValues,
    is_finite,
)
from exporter.log import REDACTOR, Redactor
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
    # Six phases per series: fewer edges here keep the page ~15 % smaller.
    Family.PHASE: (0.005, 0.025, 0.1, 0.5, 2.5, 10),
    Family.SCHEDULER_LAG: (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
}
EVENT_LOOP_LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
TOKEN_TYPES = ("prompt", "completion", "reasoning", "cached")
SKIP_REASONS = ("budget", "overlap", "rate_limited")
CHECK_OUTCOMES = ("pass", "fail")
PROBE_LABELS = ("target", "model", "probe")
# An exemplar's value comes from the server and ends up in Prometheus' storage: only an id of a
# conservative charset and length (OpenMetrics caps exemplar labels at 128 characters) that
# contains no secret is kept; anything else is dropped, not repaired.
EXEMPLAR_ID = re.compile(r"[A-Za-z0-9._:/-]{1,100}")


def exemplar_id(response_id: str | None, redactor: Redactor = REDACTOR) -> str | None:
    """The response id as an exemplar label value, or None when it is not a safe one."""
    if not response_id or not EXEMPLAR_ID.fullmatch(response_id):
        return None
    return response_id if redactor(response_id) == response_id else None


def probe_families(buckets: Mapping[Family, tuple[float, ...]]) -> list[FamilySpec]:
    """The probe metric families (DESIGN.md's table), with the configured buckets."""
    def hist(attr: str, name: str, doc: str, family: Family, extra: str | None = None):
        return FamilySpec(attr, name, "histogram", doc, extra,
                          tuple(float(b) for b in buckets[family]))

    return [
        hist("ttft", "llm_probe_ttft_seconds",
             "Time to first token (answer or reasoning): t_first - t0.", Family.TTFT),
        hist("ttfa", "llm_probe_time_to_first_answer_seconds",
             "Time to the first answer (non-reasoning) token.", Family.TIME_TO_FIRST_ANSWER),
        hist("tpot", "llm_probe_tpot_seconds",
             "Time per output token: (t_last - t_first) / (N - 1).", Family.TPOT),
        hist("inter_chunk", "llm_probe_inter_chunk_seconds",
             "Gaps between consecutive token-bearing chunks.", Family.INTER_CHUNK),
        hist("tps", "llm_probe_output_tokens_per_second",
             "Output tokens per second as the user sees it: N / E2E.", Family.TPS),
        hist("duration", "llm_probe_duration_seconds",
             "End-to-end duration of a probe: t_end - t0.", Family.DURATION),
        hist("phase", "llm_probe_phase_seconds",
             "Probe phases: resolve, connect, proxy_tunnel, tls, wait, first_token, generate.",
             Family.PHASE, "phase"),
        FamilySpec("requests", "llm_probe_requests", "counter", "Finished probes by result.",
                   "result"),
        FamilySpec("tokens", "llm_probe_tokens", "counter",
                   "Tokens by type (from usage, else estimated).", "type"),
        FamilySpec("cost", "llm_probe_cost", "counter",
                   "Cost of probes from the configured prices.", "currency"),
        FamilySpec("skipped", "llm_probe_skipped", "counter", "Probes not run, by reason.",
                   "reason"),
        FamilySpec("checks", "llm_probe_checks", "counter",
                   "Answer checks by outcome (pass, fail).", "outcome"),
        FamilySpec("success", "llm_probe_success", "gauge",
                   "Whether the last probe succeeded (1/0)."),
        FamilySpec("last_run", "llm_probe_last_run_timestamp_seconds", "gauge",
                   "Unix time the last probe ended."),
        FamilySpec("ratelimit", "llm_probe_ratelimit_remaining", "gauge",
                   "Remaining rate limit reported by the server.", "kind"),
        FamilySpec("interval", "llm_probe_interval_seconds", "gauge",
                   "Configured probe interval of the series."),
    ]


def _native_settings(config: Config) -> NativeSettings:
    native = config.global_.native_histograms
    return NativeSettings(native.schema_, native.max_buckets)


def _has_checks(series: Series) -> bool:
    return series.probe.expect is not None or any(c.expect for c in series.probe.cases)


class ExporterMetrics:
    """All metric families of the exporter on one registry."""

    def __init__(self, registry: CollectorRegistry, config: Config | None = None, *,
                 redactor: Redactor = REDACTOR) -> None:
        # `_created` series double the page for nothing Prometheus needs here.
        disable_created_metrics()
        self.registry = registry
        self._redact = redactor
        self.own = CollectorRegistry(auto_describe=True)  # the exporter's own metrics
        registry.register(self.own)
        self.probes: ProbeCollector | None = None
        self._layout: tuple[dict, dict, NativeSettings] | None = None
        self.classic_in_protobuf = True
        self._applied: dict[tuple[str, str, str], Series] = {}  # series synced by apply()
        own = self.own
        self.in_flight = Gauge("llm_probe_in_flight", "Probes in flight now.", registry=own)
        self.scheduler_lag: Histogram | None = None
        self.event_loop_lag = Histogram(
            "llm_probe_event_loop_lag_seconds",
            "How late the event loop wakes a timer; high values mean timings may be skewed.",
            buckets=EVENT_LOOP_LAG_BUCKETS, registry=own)
        build = Gauge("llm_probe_build_info", "Exporter build information.",
                      ["version", "python_version"], registry=own)
        build.labels(__version__, platform.python_version()).set(1)
        self.budget_spent = Gauge("llm_probe_budget_spent",
                                  "Spent today (UTC) against global.budget.", ["currency"],
                                  registry=own)
        self.budget_limit = Gauge("llm_probe_budget_limit",
                                  "global.budget.max_cost_per_day.", ["currency"], registry=own)
        self.reload_ok = Gauge("llm_probe_config_last_reload_successful",
                               "Whether the last config load succeeded.", registry=own)
        self.reload_time = Gauge("llm_probe_config_last_reload_success_timestamp_seconds",
                                 "Unix time of the last successful config load.", registry=own)
        if config is not None:
            self.apply(config)

    # -- layout --------------------------------------------------------------------------

    def _build(self, config: Config) -> None:
        """(Re)create the probe families for the config's constant labels and buckets."""
        if self.probes is not None:
            self.registry.unregister(self.probes)
        if self.scheduler_lag is not None:
            self.own.unregister(self.scheduler_lag)
        buckets = {**DEFAULT_BUCKETS, **config.global_.buckets}
        self.probes = ProbeCollector(probe_families(buckets), _native_settings(config))
        self.registry.register(self.probes)
        self.scheduler_lag = Histogram(
            "llm_probe_scheduler_lag_seconds", "How late probes start versus their schedule.",
            buckets=buckets[Family.SCHEDULER_LAG], registry=self.own)

    def apply(self, config: Config) -> None:
        """Create children for every configured series; remove those the config dropped."""
        layout = (dict(config.global_.labels), dict(config.global_.buckets),
                  _native_settings(config))
        if layout != self._layout:
            # Label names, constant values or buckets changed: the families must be rebuilt.
            self._build(config)
            self._layout = layout
            self._applied = {}
        self.classic_in_protobuf = config.global_.native_histograms.classic
        assert self.probes is not None
        constant = list(config.global_.labels.items())
        wanted = {s.key: s for s in config.series}
        for key in [k for k in self.probes.series if k not in wanted]:
            self.probes.remove(key)
        for key, series in wanted.items():
            if self._applied.get(key) is series:
                continue  # the very object synced last time (config.reuse_unchanged): in sync
            values = self.probes.series.get(key)
            if values is None:
                values = self.probes.add(key, [*zip(PROBE_LABELS, key, strict=True),
                                               *constant])
                for attr in ("ttft", "ttfa", "tpot", "inter_chunk", "tps", "duration",
                             "success", "last_run", "interval"):
                    values.create(attr)
                for phase in Phase:
                    values.create("phase", phase.value)
                for result in Result:
                    values.create("requests", result.value)
                for kind in TOKEN_TYPES:
                    values.create("tokens", kind)
                for reason in SKIP_REASONS:
                    values.create("skipped", reason)
            self._sync_optional(values, series)
            values.set("interval", series.interval)
        self._applied = wanted

    def _sync_optional(self, values: SeriesValues, series: Series) -> None:
        """Children that exist only for some series: cost (priced models), checks."""
        price = series.price
        for (attr, currency) in [k for k in values.scalars if k[0] == "cost"]:
            if price is None or currency != price.currency:
                values.remove(attr, currency)
        if price is not None:
            values.create("cost", price.currency)
        for outcome in CHECK_OUTCOMES:
            if _has_checks(series):
                values.create("checks", outcome)
            else:
                values.remove("checks", outcome)

    # -- recording -----------------------------------------------------------------------

    def record(self, result: ProbeResult) -> None:
        """Record one finished probe."""
        values = self.probes.series.get(result.key) if self.probes else None
        if values is None:  # the series was removed by a reload while it ran
            return
        values.inc("requests", 1, result.result.value)
        values.set("success", 1 if result.success else 0)
        values.set("last_run", result.finished_at)
        for kind, remaining in result.ratelimit.items():
            values.set("ratelimit", remaining, kind)
        if result.checked is not None and values.get("checks", "pass") is not None:
            values.inc("checks", 1, "pass" if result.checked else "fail")
        if result.result not in (Result.SUCCESS, Result.CHECK_FAILED):
            return  # latency of a failed probe would pollute the distributions
        t = result.timings
        exemplar = exemplar_id(result.response_id, self._redact)
        for attr, seconds, ex in (("ttft", t.ttft, exemplar),
                                  ("ttfa", t.time_to_first_answer, None),
                                  ("tpot", t.tpot, None), ("tps", t.tps, None),
                                  ("duration", t.duration, exemplar)):
            if seconds is not None and is_finite(seconds):
                values.observe(attr, seconds, exemplar=ex)
        values.observe_many("inter_chunk", t.inter_chunk)
        for phase, seconds in t.phases.items():
            values.observe("phase", seconds, phase.value)
        usage = result.usage
        for kind, count in (("prompt", usage.prompt), ("completion", usage.completion),
                            ("reasoning", usage.reasoning), ("cached", usage.cached)):
            if count:
                values.inc("tokens", count, kind)
        if result.cost and values.get("cost", result.currency) is not None:
            values.inc("cost", result.cost, result.currency)

    def record_skip(self, key: tuple[str, str, str], reason: str) -> None:
        """Count a probe that was not run."""
        values = self.probes.series.get(key) if self.probes else None
        if values is not None:
            values.inc("skipped", 1, reason)

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
        return self.probes.series.keys() if self.probes else ()

    # -- exposition ----------------------------------------------------------------------

    def render(self, openmetrics: bool = False) -> bytes:
        """The whole page: the exporter's own metrics, then the probe families (cached)."""
        probes = self.probes.render(openmetrics) if self.probes else b""
        if openmetrics:
            own = openmetrics_latest(self.own).removesuffix(b"# EOF\n")
            return own + probes + b"# EOF\n"
        return text_latest(self.own) + probes

    def render_protobuf(self) -> bytes:
        """The whole page as delimited protobuf: probe histograms are native histograms too."""
        probes = self.probes.render_protobuf(self.classic_in_protobuf) if self.probes else b""
        return protobuf.from_client(self.own.collect()) + probes

"""Prometheus metrics: `ExporterMetrics(registry).record(result)`, every family from `families`.

Every probe series' children are created when the config is loaded (so series exist before their
first probe) and removed when a reload drops the series; the server's own timings, the
rate-limit gauges and time to first answer of a series not known to reason appear on first need
(which children: `children`; how much of each histogram: `global.metrics`). Probe families live
in a `ProbeCollector` (incremental rendering, see `collector`); the exporter's own few metrics
sit in a small registry of their own, with the standard `process_*` metrics.
"""

from __future__ import annotations

import bisect
import math
import platform
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector
from prometheus_client import generate_latest as text_latest
from prometheus_client.metrics_core import (
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.openmetrics.exposition import generate_latest as _openmetrics_latest
from prometheus_client.utils import floatToGoString

from exporter import __version__
from exporter.config import Config, Series
from exporter.errors import Result
from exporter.exposition import protobuf
from exporter.exposition.children import (
    OPEN_SETS,
    RATELIMIT,
    REPORTED_CURRENCY,
    at_load,
    later,
    served_families,
    streamed,
)
from exporter.exposition.collector import ProbeCollector
from exporter.exposition.discovery import DiscoveryCollector
from exporter.exposition.families import (
    BY_KEY,
    DEFAULT_SHAPES,
    OBJECTIVE_FAMILY,
    CheckOutcome,
    Family,
    FamilySpec,
    IdentityOutcome,
    IdentityWindow,
    Shape,
    SkipReason,
)
from exporter.exposition.judged import JudgedCollector
from exporter.exposition.store import NativeSettings, SeriesKey, SeriesValues
from exporter.log import REDACTOR, Redactor
from exporter.providers.prices import PriceSource
from exporter.result import ProbeResult, TokenSource

# Unannotated upstream: openmetrics' generate_latest, Metric._restricted_metric.
openmetrics_latest: Callable[[CollectorRegistry], bytes] = _openmetrics_latest
_Restrict = Callable[[frozenset[str]], Metric | None]

# An exemplar's value comes from the server and ends up in Prometheus' storage: only an id of a
# conservative charset and length (OpenMetrics caps exemplar labels at 128 characters) that
# contains no secret is kept; anything else is dropped, not repaired.
EXEMPLAR_ID = re.compile(r"[A-Za-z0-9._:/-]{1,100}")


def exemplar_id(response_id: str | None, redactor: Redactor = REDACTOR) -> str | None:
    """The response id as an exemplar label value, or None when it is not a safe one."""
    if not response_id or not EXEMPLAR_ID.fullmatch(response_id):
        return None
    return response_id if redactor(response_id) == response_id else None


def edges(buckets: Mapping[Family, tuple[float, ...]], family: Family) -> tuple[float, ...]:
    """A histogram's edges in a config (`Config.buckets`), else its declared defaults."""
    return tuple(buckets.get(family) or BY_KEY[family].buckets)


def _native_settings(config: Config) -> NativeSettings:
    native = config.global_.native_histograms
    return NativeSettings(native.schema_, native.max_buckets)


class OwnHistogram:
    """A histogram of the exporter itself: no labels, no `_created`, written on one loop."""

    def __init__(self, spec: FamilySpec, bucket_edges: tuple[float, ...]) -> None:
        self.spec = spec
        self.edges = bucket_edges
        self._counts = [0] * (len(bucket_edges) + 1)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        """Add one observation."""
        self._counts[bisect.bisect_left(self.edges, value)] += 1
        self._sum += value

    def describe(self) -> list[Metric]:
        """The family, for registry look-ups by name."""
        return [HistogramMetricFamily(self.spec.name, self.spec.help)]

    def collect(self) -> Iterator[Metric]:
        """The family with its buckets (read in one pass: `_count` equals `+Inf`)."""
        counts, cumulative, buckets = list(self._counts), 0, []
        for edge, count in zip([*map(floatToGoString, self.edges), "+Inf"], counts,
                               strict=True):
            cumulative += count
            buckets.append((edge, cumulative))
        yield HistogramMetricFamily(self.spec.name, self.spec.help, buckets=buckets,
                                    sum_value=self._sum)


class _Restricted:
    """The families of a page that serve one of the given sample names (`name[]`)."""

    def __init__(self, metrics: ExporterMetrics, names: Iterable[str]) -> None:
        self._metrics = metrics
        self._names = frozenset(names)

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics.own.restricted_registry(self._names).collect()
        if self._metrics.probes is not None:
            for family in self._metrics.probes.collect(self._names):
                restrict: _Restrict = family._restricted_metric  # unannotated upstream
                restricted = restrict(self._names)
                if restricted is not None:
                    yield restricted


def refused_prices(config: Config) -> dict[tuple[str, str, str], int]:
    """Probed models whose price was refused, by (target, source, reason)."""
    models = {(s.target.name, s.model): s.refused_price for s in config.series
              if s.refused_price is not None}
    counts: dict[tuple[str, str, str], int] = {}
    for (target, _), refused in models.items():
        assert refused is not None
        key = (target, refused.source.value, refused.reason.value)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _own_gauge(family: Family, registry: CollectorRegistry) -> Gauge:
    spec = BY_KEY[family]
    return Gauge(spec.name, spec.help, spec.labels, registry=registry)


def _record_streak(values: SeriesValues, result: Result) -> None:
    """`llm_probe_consecutive_results{result}`: one more of the same result, or a new run."""
    streak = values.get(Family.CONSECUTIVE, result) or 0.0
    for previous in values.extras(Family.CONSECUTIVE):
        if previous != result:
            values.remove(Family.CONSECUTIVE, previous)
    values.set(Family.CONSECUTIVE, streak + 1, result)


# Distinct values a server may put in each served-model label of one series per UTC day; the
# rest show as OTHER_SERVED (a server naming a new model on every probe would otherwise create
# a series per probe: 86,400 a day at 1s).
MAX_SERVED_VALUES = 4
OTHER_SERVED = "other"


@dataclass(slots=True)
class ServedLabels:
    """The served-model label values one series showed today, and the last model named."""

    day: int = -1
    models: set[str] = field(default_factory=set)
    fingerprints: set[str] = field(default_factory=set)
    last_model: str | None = None

    def labels(self, day: int, model: str, fingerprint: str) -> tuple[tuple[str, str], ...]:
        """The label pairs to show for what the server named (bounded per day)."""
        if day != self.day:
            self.day, self.models, self.fingerprints = day, set(), set()
        return (("served_model", _admit(self.models, model)),
                ("system_fingerprint", _admit(self.fingerprints, fingerprint)))


def _admit(seen: set[str], value: str) -> str:
    if value in seen or value == "":
        return value
    if len(seen) < MAX_SERVED_VALUES:
        seen.add(value)
        return value
    return OTHER_SERVED


def _record_served_model(values: SeriesValues, served: ServedLabels, model: str,
                         fingerprint: str, finished_at: float) -> None:
    """The served-model info series (replaced when it changes; its label values bounded per
    day) and the change counter, which counts every change of the model the server named."""
    if served.last_model is not None and served.last_model != model:
        values.inc(Family.SERVED_MODEL_CHANGES)
    served.last_model = model
    labels = served.labels(int(finished_at // 86_400), model, fingerprint)
    if values.info(Family.SERVED_MODEL) != labels:
        values.set_info(Family.SERVED_MODEL, labels)


def _record_adapted(values: SeriesValues, parameters: tuple[str, ...]) -> None:
    """One child per adapted parameter of the series' (target, model); gone when the
    adaptation is (a changed config starts afresh)."""
    for parameter in values.extras(Family.ADAPTED_PARAMETERS):
        if parameter not in parameters:
            values.remove(Family.ADAPTED_PARAMETERS, parameter)
    for parameter in parameters:
        values.set(Family.ADAPTED_PARAMETERS, 1, parameter)


class ExporterMetrics:
    """All metric families of the exporter on one registry.

    The constructor changes no process-wide state: nothing here emits `_created` series (the
    probe families and the exporter's own histograms are rendered by this module), so
    prometheus_client's global switch is not needed.
    """

    def __init__(self, registry: CollectorRegistry, config: Config | None = None, *,
                 redactor: Redactor = REDACTOR, process_metrics: bool = True,
                 refresh: bool = True) -> None:
        self.registry = registry
        self._redact = redactor
        self._refresh = refresh  # keep scraped formats' caches fresh between scrapes
        self.own = CollectorRegistry(auto_describe=True)  # the exporter's own metrics
        registry.register(self.own)
        self.probes: ProbeCollector | None = None
        self._layout: tuple[Any, ...] | None = None
        self.classic_in_protobuf = True
        self._applied: dict[SeriesKey, Series] = {}  # series synced by apply()
        self._served: dict[SeriesKey, ServedLabels] = {}  # served-model labels shown today
        self._shapes: Mapping[Family, Shape] = DEFAULT_SHAPES
        own = self.own
        self.in_flight = _own_gauge(Family.IN_FLIGHT, own)
        self.scheduler_lag = self._own_histogram(Family.SCHEDULER_LAG, {})
        self.event_loop_lag = self._own_histogram(Family.EVENT_LOOP_LAG, {})
        build = _own_gauge(Family.BUILD_INFO, own)
        build.labels(__version__, platform.python_version()).set(1)
        self.budget_spent = _own_gauge(Family.BUDGET_SPENT, own)
        self.budget_limit = _own_gauge(Family.BUDGET_LIMIT, own)
        self.budget_record_ok = _own_gauge(Family.BUDGET_RECORD_OK, own)
        self.state_bytes = _own_gauge(Family.STATE_BYTES, own)
        self.budget_target_spent = _own_gauge(Family.BUDGET_TARGET_SPENT, own)
        self.budget_target_limit = _own_gauge(Family.BUDGET_TARGET_LIMIT, own)
        self.reload_ok = _own_gauge(Family.RELOAD_OK, own)
        self.reload_time = _own_gauge(Family.RELOAD_TIME, own)
        self.price_info = _own_gauge(Family.PRICE_INFO, own)
        self.deprecation = _own_gauge(Family.MODEL_DEPRECATION, own)
        self._retiring: dict[tuple[str, str], float] = {}  # (target, model) → unix time
        self._priced: dict[tuple[str, str], tuple[str, str]] = {}  # (target, model) → labels
        self.prices_refused = _own_gauge(Family.PRICES_REFUSED, own)
        self.discoveries = DiscoveryCollector()
        own.register(self.discoveries)
        self.judged = JudgedCollector()  # judged quality: verdicts, cases, calibration
        own.register(self.judged)
        if process_metrics:
            ProcessCollector(registry=own)
        if config is not None:
            self.apply(config)

    def _own_histogram(self, family: Family, buckets: Mapping[Family, tuple[float, ...]],
                       previous: OwnHistogram | None = None) -> OwnHistogram:
        """The exporter's own histogram with the config's edges (kept if they are unchanged)."""
        wanted = edges(buckets, family)
        if previous is not None:
            if previous.edges == wanted:
                return previous
            self.own.unregister(previous)
        histogram = OwnHistogram(BY_KEY[family], wanted)
        self.own.register(histogram)
        return histogram

    # -- layout --------------------------------------------------------------------------

    def _build(self, config: Config) -> None:
        """(Re)create the probe families for the config's constant labels, shapes and edges."""
        if self.probes is not None:
            self.registry.unregister(self.probes)
        self.probes = ProbeCollector(served_families(config), _native_settings(config),
                                     refresh=self._refresh)
        self.registry.register(self.probes)
        self.scheduler_lag = self._own_histogram(Family.SCHEDULER_LAG, config.buckets,
                                                 self.scheduler_lag)
        self.event_loop_lag = self._own_histogram(Family.EVENT_LOOP_LAG, config.buckets,
                                                  self.event_loop_lag)

    def apply(self, config: Config) -> None:
        """Create children for every configured series; remove those the config dropped."""
        self._apply_prices(config)
        self.judged.apply(config)
        self._apply_retirements(config)
        shapes = config.global_.shapes
        layout = (dict(config.global_.labels), dict(config.buckets), _native_settings(config),
                  shapes)
        if layout != self._layout:
            # Label names, constant values, shapes or buckets changed: rebuild the families.
            self._build(config)
            self._layout = layout
            self._applied = {}
        self._shapes = shapes
        self.classic_in_protobuf = config.global_.native_histograms.classic
        assert self.probes is not None
        constant = list(config.global_.labels.items())
        wanted = {s.key: s for s in config.series}
        for key in [k for k in self.probes.series if k not in wanted]:
            self.probes.remove(key)
            self._served.pop(key, None)
        for key, series in wanted.items():
            if self._applied.get(key) is series:
                continue  # the very object synced last time (config.reuse_unchanged): in sync
            values = self.probes.series.get(key)
            if values is None:
                values = self.probes.add(key, [*series.labels, *constant])
            self._sync(values, series)
        self._applied = wanted

    def _apply_prices(self, config: Config) -> None:
        """One `llm_probe_price_info` per probed (target, model), by the source of its price."""
        wanted = {}
        for series in config.series:
            price = series.price
            wanted[(series.target.name, series.model)] = (
                (price.source.value, price.currency) if price else (PriceSource.UNKNOWN, ""))
        for key, labels in list(self._priced.items()):
            if wanted.get(key) != labels:
                self.price_info.remove(*key, *labels)
                del self._priced[key]
        for key, labels in wanted.items():
            if key not in self._priced:
                self.price_info.labels(*key, *labels).set(1)
                self._priced[key] = labels
        self.prices_refused.clear()
        for (target, source, reason), count in refused_prices(config).items():
            self.prices_refused.labels(target, source, reason).set(count)

    def _apply_retirements(self, config: Config) -> None:
        """`llm_probe_model_deprecation_timestamp_seconds` per probed (target, model) whose
        gateway names a retirement date; a model that lost its date loses its series."""
        wanted = {(s.target.name, s.model): s.gateway.retires for s in config.series
                  if s.gateway is not None and s.gateway.retires is not None}
        for key in [k for k in self._retiring if k not in wanted]:
            self.deprecation.remove(*key)
            del self._retiring[key]
        for key, when in wanted.items():
            if self._retiring.get(key) != when:
                self.deprecation.labels(*key).set(when)
                self._retiring[key] = when

    def _sync(self, values: SeriesValues, series: Series) -> None:
        """Give a series the children `children.at_load` lists (keeping those that appeared on
        first need), and set its configured gauges."""
        children = at_load(series, self._shapes)
        keep = {*children, *later(series, self._shapes)}
        for child in values.children():
            if child not in keep and child[0] not in OPEN_SETS:
                values.remove(*child)
        for child in children:
            values.create(*child)
        values.set(Family.INTERVAL, series.interval)
        for objective, seconds in series.slo.latency.items():
            values.set(Family.OBJECTIVE_SECONDS, seconds, objective)
        for ratio_objective, ratio in series.slo.ratio.items():
            values.set(Family.OBJECTIVE_RATIO, ratio, ratio_objective)

    # -- recording -----------------------------------------------------------------------

    def record(self, result: ProbeResult) -> None:
        """Record one finished probe."""
        values = self.probes.series.get(result.key) if self.probes else None
        series = self._applied.get(result.key)
        if values is None or series is None:  # the series was removed by a reload while it ran
            return
        values.inc(Family.REQUESTS, 1, result.result)
        values.set(Family.SUCCESS, 1 if result.success else 0)
        _record_adapted(values, result.adapted)
        values.set(Family.LAST_RUN, result.finished_at)
        for kind, remaining in result.ratelimit.items():
            family = RATELIMIT.get(kind)
            if family is not None:
                values.set(family, remaining)
        if result.checked is not None and values.get(Family.CHECKS, CheckOutcome.PASS) is not None:
            values.inc(Family.CHECKS, 1, CheckOutcome.PASS if result.checked else CheckOutcome.FAIL)
        _record_streak(values, result.result)
        if result.served_model:
            served = self._served.setdefault(result.key, ServedLabels())
            _record_served_model(values, served, result.served_model,
                                 result.system_fingerprint or "", result.finished_at)
        ratio = result.input_tokens_ratio
        if ratio is not None and math.isfinite(ratio):
            values.create(Family.INPUT_TOKENS_RATIO)
            values.set(Family.INPUT_TOKENS_RATIO, ratio)
        if result.result not in (Result.SUCCESS, Result.CHECK_FAILED):
            return  # latency of a failed probe would pollute the distributions
        t = result.timings
        exemplar = exemplar_id(result.response_id, self._redact)
        observed = {Family.TTFT: t.ttft, Family.TIME_TO_FIRST_ANSWER: t.time_to_first_answer,
                    Family.TPOT: t.tpot, Family.TPS: t.tps, Family.DURATION: t.duration}
        for family, seconds in observed.items():
            if seconds is None or not math.isfinite(seconds):
                continue
            if not values.has(family):
                if not self._seen_reasoning(series, family, seconds, t.ttft):
                    continue  # a family turned off (global.metrics), or not streamed
                values.create(family)
            values.observe(family, seconds, exemplar=exemplar if family in (
                Family.TTFT, Family.DURATION) else None)
        # Good events against the series' own objectives, counted with the observation.
        for objective, limit in series.slo.latency.items():
            seconds = observed[OBJECTIVE_FAMILY[objective]]
            if seconds is not None and math.isfinite(seconds) and seconds <= limit:
                values.inc(Family.OBJECTIVE_MET, 1, objective)
        if t.inter_chunk and values.has(Family.INTER_CHUNK):
            values.observe_many(Family.INTER_CHUNK, t.inter_chunk)
        phases_on = self._shapes[Family.PHASE] is not Shape.OFF
        for phase, seconds in t.phases.items():
            if phases_on:
                values.create(Family.PHASE, phase)  # a no-op but for an unforeseen phase
                values.observe(Family.PHASE, seconds, phase)
        if self._shapes[Family.SERVER_DURATION] is not Shape.OFF:
            for server_phase, seconds in result.server_timings.items():
                if math.isfinite(seconds):
                    values.create(Family.SERVER_DURATION, server_phase)  # only where reported
                    values.observe(Family.SERVER_DURATION, seconds, server_phase)
        for token_type, count in result.usage.disjoint().items():
            if count:
                values.inc(Family.TOKENS, count, token_type)
        if result.token_source is TokenSource.ESTIMATE and result.output_tokens:
            values.inc(Family.ESTIMATED_TOKENS, result.output_tokens)
        if result.cost and values.get(Family.COST, result.currency) is not None:
            values.inc(Family.COST, result.cost, result.currency)
        uncached = result.cost_without_cache
        if uncached and values.get(Family.COST_WITHOUT_CACHE, result.currency) is not None:
            values.inc(Family.COST_WITHOUT_CACHE, uncached, result.currency)
        if result.reported_cost is not None:
            values.create(Family.REPORTED_COST, REPORTED_CURRENCY)  # only gateways report it
            values.inc(Family.REPORTED_COST, result.reported_cost, REPORTED_CURRENCY)
        if result.claimed_cost is not None:
            values.create(Family.COST_CAPPED)  # on first need: an over-claim is rare
            values.inc(Family.COST_CAPPED, 1)

    def _seen_reasoning(self, series: Series, family: Family, seconds: float,
                        ttft: float | None) -> bool:
        """Whether a probe shows its streamed series reasons, for `time_to_first_answer: auto`:
        the first answer token came after the first token."""
        return (family is Family.TIME_TO_FIRST_ANSWER and self._shapes[family] is Shape.AUTO
                and ttft is not None and seconds > ttft and streamed(series))

    def record_skip(self, key: SeriesKey, reason: SkipReason) -> None:
        """Count a probe that was not run."""
        values = self.probes.series.get(key) if self.probes else None
        if values is not None:
            values.inc(Family.SKIPPED, 1, reason)

    def set_identity_samples(self, key: SeriesKey, baseline: int, current: int) -> None:
        """An identity series' answers in its reference sample and in the open window."""
        values = self.probes.series.get(key) if self.probes else None
        if values is not None and values.has(Family.IDENTITY_SAMPLES, IdentityWindow.BASELINE):
            values.set(Family.IDENTITY_SAMPLES, baseline, IdentityWindow.BASELINE)
            values.set(Family.IDENTITY_SAMPLES, current, IdentityWindow.CURRENT)

    def record_identity_test(self, key: SeriesKey, pvalue: float, distance: float,
                             different: bool) -> None:
        """One test window of an identity series: its p-value, statistic and verdict (and the
        run of different windows it extends or ends)."""
        values = self.probes.series.get(key) if self.probes else None
        if values is None or not values.has(Family.IDENTITY_TESTS, IdentityOutcome.SAME):
            return  # removed (or no longer an identity series) while the test ran
        values.set(Family.IDENTITY_PVALUE, pvalue)
        values.set(Family.IDENTITY_DISTANCE, distance)
        values.inc(Family.IDENTITY_TESTS, 1, IdentityOutcome.DIFFERENT if different
                   else IdentityOutcome.SAME)
        streak = values.get(Family.IDENTITY_STREAK) or 0.0
        values.set(Family.IDENTITY_STREAK, streak + 1 if different else 0.0)

    def observe_lag(self, seconds: float) -> None:
        """Record how late a probe started."""
        self.scheduler_lag.observe(seconds)

    def set_budget(self, budget: Any) -> None:
        """Show the daily budget and today's spend (None clears them)."""
        self.budget_spent.clear()
        self.budget_limit.clear()
        self.budget_record_ok.clear()
        self.budget_target_spent.clear()
        self.budget_target_limit.clear()
        if budget is not None:
            self.budget_spent.labels(budget.currency).set(budget.spent)
            self.budget_limit.labels(budget.currency).set(budget.limit)
            self.budget_record_ok.labels(budget.currency).set(0 if budget.problem else 1)
            for target, share in budget.shares.items():
                self.budget_target_limit.labels(target, budget.currency).set(share)
                self.budget_target_spent.labels(target, budget.currency).set(
                    budget.by_target.get(target, 0.0))

    def set_state_bytes(self, size: int) -> None:
        """Show the state directory's size in bytes (0 without one)."""
        self.state_bytes.set(size)

    def reload_status(self, ok: bool, when: float | None = None) -> None:
        """Record the outcome of a config (re)load."""
        self.reload_ok.set(1 if ok else 0)
        if ok and when is not None:
            self.reload_time.set(when)

    # -- exposition ----------------------------------------------------------------------

    def restricted(self, names: Iterable[str]) -> _Restricted:
        """A collector of only the families serving these sample names (`/metrics?name[]=`)."""
        return _Restricted(self, names)

    def render(self, openmetrics: bool = False) -> bytes:
        """The whole page: the exporter's own metrics, then the probe families (cached)."""
        return b"".join(self.render_chunks(openmetrics))

    def render_chunks(self, openmetrics: bool = False) -> list[bytes]:
        """The whole text page in pieces, to join or write one after another."""
        probes = self.probes.text_chunks(openmetrics) if self.probes else []
        if openmetrics:
            own = openmetrics_latest(self.own).removesuffix(b"# EOF\n")
            return [own, *probes, b"# EOF\n"]
        return [text_latest(self.own), *probes]

    def render_protobuf(self) -> bytes:
        """The whole page as delimited protobuf: probe histograms are native histograms too."""
        return b"".join(self.protobuf_chunks())

    def protobuf_chunks(self) -> list[bytes]:
        """The whole protobuf page in pieces, to join or write one after another."""
        probes = self.probes.protobuf_chunks(self.classic_in_protobuf) if self.probes else []
        return [protobuf.from_client(self.own.collect()), *probes]

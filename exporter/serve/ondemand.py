"""`/probe`'s answer: blackbox-style `llm_probe_ondemand_*` gauges, its deadline and shard hints.

The families have names of their own, so none is served with another type on `/metrics`, and
carry every probe label (target, model, probe and the global labels).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from exporter.config import Config, Series
from exporter.config.shard import parse_shard, shard_of
from exporter.errors import Result
from exporter.exposition.families import Family, Scope, SkipReason, families
from exporter.result import ProbeResult, TokenSource, Usage

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


class OnDemandAnswer:
    """`/probe`'s families for one run, as a collector prometheus_client's encoders render."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        """The answer's families, each with at least one sample."""
        return iter(self._families)


def ondemand_answer(series: Series, constant: Mapping[str, str], result: ProbeResult | None,
                    *, cached: bool = False, skipped: SkipReason | None = None
                    ) -> OnDemandAnswer:
    """`/probe`'s answer (blackbox style): the `llm_probe_ondemand_*` gauges of `families.py`.

    Every family carries the probe labels (target, model, probe and the global labels) and a
    name of its own, so none clashes with a `/metrics` family of another type. A value that is
    undefined for this run (no TPOT of a one-token answer, no checks) leaves its family out.
    """
    label_names = [*(name for name, _ in series.labels), *constant]
    label_values = [*(value for _, value in series.labels), *constant.values()]
    answer: list[Metric] = []
    for spec in families(Scope.ONDEMAND):
        samples = _samples(spec.key, result, cached, skipped)
        if not samples:
            continue
        gauge = GaugeMetricFamily(spec.name, spec.help, labels=[*label_names, *spec.labels])
        for extra, value in samples.items():
            gauge.add_metric([*label_values, *([extra] if extra is not None else [])], value)
        answer.append(gauge)
    return OnDemandAnswer(answer)


def _samples(family: Family, result: ProbeResult | None, cached: bool,
             skipped: SkipReason | None) -> dict[str | None, float]:
    """One on-demand family's samples by the value of its extra label (None: no label)."""
    if family is Family.ONDEMAND_SKIPPED:
        return {skipped: 1} if skipped is not None else {}
    if result is None:
        return {}
    t = result.timings
    one: dict[Family, float | None] = {
        Family.ONDEMAND_SUCCESS: 1 if result.success else 0,
        Family.ONDEMAND_TTFT: t.ttft,
        Family.ONDEMAND_TIME_TO_FIRST_ANSWER: t.time_to_first_answer,
        Family.ONDEMAND_TPOT: t.tpot,
        Family.ONDEMAND_TPS: t.tps,
        Family.ONDEMAND_DURATION: t.duration,
        Family.ONDEMAND_TOKENS_ESTIMATED: 1 if result.token_source is TokenSource.ESTIMATE else 0,
        Family.ONDEMAND_HTTP_STATUS: result.status,
        Family.ONDEMAND_CHECK_SUCCESS: None if result.checked is None else int(result.checked),
        Family.ONDEMAND_CACHED: 1 if cached else 0,
    }
    if family in one:
        value = one[family]
        return {} if value is None else {None: value}
    if family is Family.ONDEMAND_RESULT:
        return {value: 1 if value is result.result else 0 for value in Result}
    if family is Family.ONDEMAND_PHASE:
        return {phase: seconds for phase, seconds in t.phases.items()}
    if family is Family.ONDEMAND_SERVER_DURATION:
        return {phase: seconds for phase, seconds in result.server_timings.items()}
    if family is Family.ONDEMAND_TOKENS:
        if result.usage == Usage():
            return {}
        return {kind: count for kind, count in result.usage.disjoint().items()}
    if family is Family.ONDEMAND_COST:
        return {} if result.cost is None else {result.currency or "": result.cost}
    raise AssertionError(f"on-demand family {family} has no value")  # a new family: add it here

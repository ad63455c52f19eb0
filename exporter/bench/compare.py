"""Compare a bench run with a baseline run; `--fail-on` rules decide what is a regression.

A rule is `metric=<limit>`: `ttft_p95=+20%` fails when p95 TTFT grew by more than 20 %,
`success_rate=-1%` when the success rate fell by more than 1 % (relative), `ttft_p95=+50ms` or
`success_rate=-0.01` are absolute limits. Without a sign the bad direction is the metric's own
(up for latencies and cost, down for success rate, throughput, goodput and TPS).
Levels are matched by series and level; a baseline with a single series is matched to a run with a
single series by level alone, so two models or providers can be compared.
A rule that compares nothing — the baseline lacks the level, or either value is missing — is
*unchecked*, never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.bench.model import STATS, Comparison, Delta, Latency, Summary
from exporter.commands.cells import fmt_ms

LATENCY_METRICS = frozenset(f"{name}_{stat}" for name in (*Latency, "tfa") for stat in STATS)
# Metrics where a higher value is better; every other metric is better lower.
HIGHER_IS_BETTER = frozenset(
    {"success_rate", "throughput", "output_tps", "goodput", "goodput_ratio"}
    | {f"tps_{stat}" for stat in STATS})
METRICS = LATENCY_METRICS | HIGHER_IS_BETTER | {"cost", "cost_total"}
DEFAULT_METRICS = ("success_rate", "ttft_p50", "ttft_p95", "tpot_p50", "e2e_p95", "output_tps",
                   "cost")
LEVEL_MISSING = "level not in baseline"
NOT_MEASURED = "not measured"


def is_duration(metric: str) -> bool:
    """Whether a metric is a time in seconds (its absolute limits are durations)."""
    return metric in LATENCY_METRICS and not metric.startswith("tps_")


def format_value(metric: str, value: float | None) -> str:
    """A metric value in its natural unit (times in ms), for the tables and the HTML report."""
    if value is None:
        return "–"
    if is_duration(metric):
        return fmt_ms(value)
    if metric in ("success_rate", "goodput_ratio"):
        return f"{value:.1%}"
    if metric.startswith("cost"):
        return f"{value:.6f}"
    return f"{value:.2f}"


@dataclass(frozen=True)
class Rule:
    """One `--fail-on` limit: a signed relative (fraction) or absolute change."""

    metric: str
    limit: float
    relative: bool
    text: str

    @property
    def worse_up(self) -> bool:
        """Whether an increase is the bad direction."""
        return self.limit > 0

    def violated(self, baseline: float, current: float) -> bool:
        """Whether going from `baseline` to `current` breaks this limit."""
        if self.relative:
            if baseline == 0:
                change = 0.0 if current == 0 else math.copysign(math.inf, current)
            else:
                change = (current - baseline) / abs(baseline)
        else:
            change = current - baseline
        return change > self.limit if self.worse_up else change < self.limit


def relative_change(baseline: float | None, current: float | None) -> float | None:
    """(current − baseline) / |baseline| (None when undefined)."""
    if baseline is None or current is None or baseline == 0:
        return None
    return (current - baseline) / abs(baseline)


def compare(baseline: Sequence[Summary], current: Sequence[Summary],
            rules: Sequence[Rule]) -> list[Delta]:
    """Every ruled (or default) metric of every current level against the baseline."""
    base = {(s.series, s.mode, s.level): s for s in baseline}
    base_series = {s.series for s in baseline}
    cur_series = {s.series for s in current}
    by_level_only = len(base_series) == 1 and len(cur_series) == 1 and base_series != cur_series
    metrics: list[tuple[str, Rule | None]] = (
        [(r.metric, r) for r in rules] if rules else [(m, None) for m in DEFAULT_METRICS])
    deltas: list[Delta] = []
    for summary in current:
        name = summary.series
        old = base.get(((next(iter(base_series)) if by_level_only else name), summary.mode,
                        summary.level))
        now = summary.metrics()
        then = old.metrics() if old is not None else {}
        for metric, rule in metrics:
            a, b = then.get(metric), now.get(metric)
            limit = rule.text if rule else None
            if old is None or a is None or b is None:
                deltas.append(Delta(name, summary.label, metric, a, b, None, limit, False,
                                    LEVEL_MISSING if old is None else NOT_MEASURED))
                continue
            bad = rule is not None and rule.violated(a, b)
            deltas.append(Delta(name, summary.label, metric, a, b, relative_change(a, b),
                                limit, bad))
    return deltas


def comparison(baseline: str, fail_on: str | None, deltas: Sequence[Delta]) -> Comparison:
    """The comparison as stored in run.json."""
    return Comparison(baseline=baseline, fail_on=fail_on, deltas=tuple(deltas),
                      regressions=sum(d.regression for d in deltas),
                      unchecked=sum(d.unchecked for d in deltas))

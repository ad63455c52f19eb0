"""Compare a bench run with a baseline run.json; `--fail-on` rules decide what is a regression.

A rule is `metric=<limit>`: `ttft_p95=+20%` fails when p95 TTFT grew by more than 20 %,
`success_rate=-1%` when the success rate fell by more than 1 % (relative), `ttft_p95=+50ms` or
`success_rate=-0.01` are absolute limits. Without a sign the bad direction is the metric's own
(up for latencies and cost, down for success rate, throughput, goodput and TPS).
Levels are matched by series and level; a baseline with a single series is matched to a run with a
single series by level alone, so two models or providers can be compared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from exporter.bench import LATENCIES, PERCENTILES, flat_metrics, series_name
from exporter.config import parse_duration
from exporter.oneshot import fmt_ms

_STATS = (*(f"p{q}" for q in PERCENTILES), "mean", "min", "max")
LATENCY_METRICS = frozenset(f"{name}_{stat}" for name in (*LATENCIES, "tfa") for stat in _STATS)
# Metrics where a higher value is better; every other metric is better lower.
HIGHER_IS_BETTER = frozenset(
    {"success_rate", "throughput", "output_tps", "goodput", "goodput_ratio"}
    | {f"tps_{stat}" for stat in _STATS})
METRICS = LATENCY_METRICS | HIGHER_IS_BETTER | {"cost", "cost_total"}
DEFAULT_METRICS = ("success_rate", "ttft_p50", "ttft_p95", "tpot_p50", "e2e_p95", "output_tps",
                   "cost")


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


def parse_fail_on(text: str | None) -> list[Rule]:
    """Parse `ttft_p95=+20%,cost=+15%,success_rate=-1%`."""
    if not text:
        return []
    rules = []
    for part in text.split(","):
        part = part.strip()
        metric, sep, value = part.partition("=")
        metric, value = metric.strip().lower(), value.strip()
        if not sep or not value:
            raise ValueError(f"--fail-on: {part!r}: use metric=+20% (or -1%, +50ms)")
        if metric not in METRICS:
            raise ValueError(f"--fail-on: unknown metric {metric!r}; known: "
                             f"{', '.join(sorted(METRICS - LATENCY_METRICS))}, and "
                             f"<{'|'.join((*LATENCIES, 'tfa'))}>_<{'|'.join(_STATS)}>")
        sign = value[0] if value[0] in "+-" else ""
        number = value[1:] if sign else value
        try:
            if number.endswith("%"):
                amount, relative = float(number[:-1]) / 100, True
            elif metric in LATENCY_METRICS and not metric.startswith("tps_"):
                amount, relative = parse_duration(number), False
            else:
                amount, relative = float(number), False
        except ValueError as exc:
            raise ValueError(f"--fail-on: {part!r}: {exc}") from None
        if amount < 0 or not math.isfinite(amount):
            raise ValueError(f"--fail-on: {part!r}: the limit must be a finite amount")
        if not sign:
            sign = "-" if metric in HIGHER_IS_BETTER else "+"
        rules.append(Rule(metric, amount if sign == "+" else -amount, relative, part))
    return rules


@dataclass(frozen=True)
class Delta:
    """One metric of one level, baseline against current."""

    series: str
    level: str
    metric: str
    baseline: float | None
    current: float | None
    rule: Rule | None
    regression: bool
    note: str = ""

    @property
    def change(self) -> float | None:
        """Relative change (None when undefined)."""
        if self.baseline is None or self.current is None or self.baseline == 0:
            return None
        return (self.current - self.baseline) / abs(self.baseline)

    def as_json(self) -> dict[str, Any]:
        """For run.json."""
        return {"series": self.series, "level": self.level, "metric": self.metric,
                "baseline": self.baseline, "current": self.current, "change": self.change,
                "limit": self.rule.text if self.rule else None,
                "regression": self.regression, "note": self.note}


def _index(document: Mapping[str, Any]) -> dict[tuple[str, str, float], Mapping[str, Any]]:
    return {(series_name(s), s["mode"], s["level"]): s for s in document.get("summaries", [])}


def compare(baseline: Mapping[str, Any], current: Mapping[str, Any],
            rules: Sequence[Rule]) -> list[Delta]:
    """Every ruled (or default) metric of every current level against the baseline."""
    if "summaries" not in baseline:
        raise ValueError("the baseline is not a bench run.json (no `summaries`)")
    base = _index(baseline)
    base_series = {key[0] for key in base}
    cur_series = {series_name(s) for s in current["summaries"]}
    by_level_only = len(base_series) == 1 and len(cur_series) == 1 and base_series != cur_series
    metrics: list[tuple[str, Rule | None]] = (
        [(r.metric, r) for r in rules] if rules else [(m, None) for m in DEFAULT_METRICS])
    deltas: list[Delta] = []
    for summary in current["summaries"]:
        name = series_name(summary)
        key = ((next(iter(base_series)) if by_level_only else name), summary["mode"],
               summary["level"])
        old = base.get(key)
        now = flat_metrics(summary)
        then = flat_metrics(old) if old is not None else {}
        for metric, rule in metrics:
            a, b = then.get(metric), now.get(metric)
            if old is None:
                deltas.append(Delta(name, summary["label"], metric, None, b, rule, False,
                                    "level not in baseline"))
                continue
            if a is None or b is None:
                deltas.append(Delta(name, summary["label"], metric, a, b, rule, False,
                                    "not measured"))
                continue
            bad = rule is not None and rule.violated(a, b)
            deltas.append(Delta(name, summary["label"], metric, a, b, rule, bad))
    return deltas


def format_value(metric: str, value: float | None) -> str:
    """A metric value in its natural unit."""
    if value is None:
        return "–"
    if metric in LATENCY_METRICS and not metric.startswith("tps_"):
        return fmt_ms(value)
    if metric in ("success_rate", "goodput_ratio"):
        return f"{value:.1%}"
    if metric.startswith("cost"):
        return f"{value:.6f}"
    return f"{value:.2f}"


def print_comparison(console: Console, deltas: Sequence[Delta]) -> None:
    """The diff table and a verdict line."""
    table = Table(title="compared with baseline", title_justify="left")
    for column in ("series", "level", "metric", "baseline", "current", "change", "limit",
                   "verdict"):
        table.add_column(column, no_wrap=True, justify="right" if column in (
            "baseline", "current", "change") else "left")
    for d in deltas:
        change = d.change
        verdict = ("[red bold]REGRESSION[/red bold]" if d.regression
                   else d.note or ("ok" if d.rule else ""))
        table.add_row(d.series, d.level, d.metric, format_value(d.metric, d.baseline),
                      format_value(d.metric, d.current),
                      "–" if change is None else f"{change:+.1%}",
                      d.rule.text if d.rule else "", verdict)
    console.print(table)
    regressions = [d for d in deltas if d.regression]
    if regressions:
        console.print(f"[red]{len(regressions)} regression(s) beyond --fail-on limits: "
                      + ", ".join(f"{d.series} {d.level} {d.metric}" for d in regressions)
                      + "[/red]", soft_wrap=True)
    elif any(d.rule for d in deltas):
        console.print("[green]no regression beyond the --fail-on limits[/green]")

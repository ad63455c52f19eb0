"""Compare a bench run with a baseline run; `--fail-on` rules decide what is a regression.

A rule is `metric=<limit>`: `ttft_p95=+20%` fails when p95 TTFT grew by more than 20 %,
`success_rate=-1%` when the success rate fell by more than 1 % (relative), `ttft_p95=+50ms` or
`success_rate=-0.01` are absolute limits. Without a sign the bad direction is the metric's own
(up for latencies and cost, down for success rate, throughput, goodput and TPS).
Levels are matched by series and level; a baseline with a single series is matched to a run with a
single series by level alone, so two models or providers can be compared.
A rule that compares nothing — the baseline lacks the level, or either value is missing — is
*unchecked*, never a pass.

A rule on a per-request metric (latency statistics, `success_rate`, `cost`) is decided by
`gate.decide` on both runs' raw records: ok, regression, or *undecided* when the requests are
too few to tell a change of the limit's size from noise. Whole-level figures (throughput,
goodput, `cost_total`) have one value per run and are compared as they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from exporter.bench.gate import DEFAULT_CONFIDENCE, Verdict, decide
from exporter.bench.model import STATS, Comparison, Delta, Latency, Summary
from exporter.bench.summary import latency_of
from exporter.commands.cells import fmt_ms
from exporter.record import LoadMode, Record
from exporter.result import Verdict as Judged

LATENCY_METRICS = frozenset(f"{name}_{stat}" for name in (*Latency, "tfa") for stat in STATS)
# Metrics where a higher value is better; every other metric is better lower.
HIGHER_IS_BETTER = frozenset(
    {"success_rate", "pass_rate", "throughput", "output_tps", "goodput", "goodput_ratio"}
    | {f"tps_{stat}" for stat in STATS})
METRICS = LATENCY_METRICS | HIGHER_IS_BETTER | {"cost", "cost_total"}
DEFAULT_METRICS = ("success_rate", "ttft_p50", "ttft_p95", "tpot_p50", "e2e_p95", "output_tps",
                   "cost")
LEVEL_MISSING = "level not in baseline"
NOT_MEASURED = "not measured"
# Why a cost compared nothing, and the fix.
NO_PRICE = ("not measured: no price for the model (set the target's prices:, or discover: to "
            "use the gateway's)")


def is_duration(metric: str) -> bool:
    """Whether a metric is a time in seconds (its absolute limits are durations)."""
    return metric in LATENCY_METRICS and not metric.startswith("tps_")


def format_value(metric: str, value: float | None) -> str:
    """A metric value in its natural unit (times in ms), for the tables and the HTML report."""
    if value is None:
        return "–"
    if is_duration(metric):
        return fmt_ms(value)
    if metric in ("success_rate", "pass_rate", "goodput_ratio"):
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


LevelKey = tuple[str, LoadMode, int | float]  # series, mode, level
_LATENCIES = {**{name.value: name for name in Latency}, "tfa": Latency.TIME_TO_FIRST_ANSWER}


def by_level(records: Sequence[Record]) -> dict[LevelKey, list[Record]]:
    """Bench records grouped by (series, mode, level)."""
    out: dict[LevelKey, list[Record]] = {}
    for record in records:
        if record.bench is not None:
            r, level = record.result, record.bench.level
            out.setdefault((f"{r.target}/{r.model}/{r.probe}", level.mode, level.value),
                           []).append(record)
    return out


def samples(records: Sequence[Record], metric: str) -> tuple[list[tuple[float, ...]], str] | None:
    """Per-request values of a metric and the statistic over them (`ttft_p95` → TTFT, `p95`);
    None for whole-level figures."""
    if metric == "success_rate":
        return [(1.0 if r.result.success else 0.0,) for r in records], "mean"
    if metric == "pass_rate":  # the judge's verdicts; its errors are not the model's
        verdicts = [r.bench.judge_verdict for r in records if r.bench is not None]
        return [(1.0 if v is Judged.PASS else 0.0,) for v in verdicts
                if v in (Judged.PASS, Judged.FAIL)], "mean"
    ok = [r.result for r in records if r.result.success]
    if metric == "cost":
        return [(r.cost,) for r in ok if r.cost is not None], "mean"
    name, _, stat = metric.rpartition("_")
    latency = _LATENCIES.get(name)
    if latency is None or stat not in STATS:
        return None
    return [values for r in ok if (values := latency_of(r, latency))], stat


def compare(baseline: Sequence[Summary], current: Sequence[Summary],
            rules: Sequence[Rule], *, baseline_records: Sequence[Record] = (),
            current_records: Sequence[Record] = (),
            confidence: float = DEFAULT_CONFIDENCE) -> list[Delta]:
    """Every ruled (or default) metric of every current level against the baseline; ruled
    per-request metrics are decided on the raw records (`gate.decide`)."""
    base = {(s.series, s.mode, s.level): s for s in baseline}
    base_series = {s.series for s in baseline}
    cur_series = {s.series for s in current}
    by_level_only = len(base_series) == 1 and len(cur_series) == 1 and base_series != cur_series
    metrics: list[tuple[str, Rule | None]] = (
        [(r.metric, r) for r in rules] if rules else [(m, None) for m in DEFAULT_METRICS])
    base_records, cur_records = by_level(baseline_records), by_level(current_records)
    deltas: list[Delta] = []
    for summary in current:
        name = summary.series
        key = ((next(iter(base_series)) if by_level_only else name), summary.mode,
               summary.level)
        old = base.get(key)
        now = summary.metrics()
        then = old.metrics() if old is not None else {}
        for metric, rule in metrics:
            a, b = then.get(metric), now.get(metric)
            limit = rule.text if rule else None
            if old is None or a is None or b is None:
                deltas.append(Delta(name, summary.label, metric, a, b, None, limit, False,
                                    LEVEL_MISSING if old is None else
                                    NO_PRICE if metric.startswith("cost") else NOT_MEASURED))
                continue
            delta = Delta(name, summary.label, metric, a, b, relative_change(a, b), limit,
                          rule is not None and rule.violated(a, b))
            if rule is not None:
                delta = _decided(delta, rule, base_records.get(key, []),
                                 cur_records.get((name, summary.mode, summary.level), []),
                                 confidence)
            deltas.append(delta)
    return deltas


def _decided(delta: Delta, rule: Rule, baseline: Sequence[Record], current: Sequence[Record],
             confidence: float) -> Delta:
    """The delta with the gate's verdict on the raw records (as it was for whole-level
    figures, or when a run kept no records)."""
    old, new = samples(baseline, rule.metric), samples(current, rule.metric)
    if old is None or new is None or not old[0] or not new[0]:
        return delta
    decision = decide(old[0], new[0], stat=old[1], limit=rule.limit, relative=rule.relative,
                      confidence=confidence, binary=rule.metric == "pass_rate")
    if decision is None:
        return delta
    return replace(delta, regression=decision.verdict is Verdict.REGRESSION,
                   undecided=decision.verdict is Verdict.UNDECIDED,
                   interval=((decision.low, decision.high)
                             if math.isfinite(decision.low) and math.isfinite(decision.high)
                             else None), requests=decision.requests,
                   requests_needed=decision.requests_needed)


def limit_change(limit: str) -> str:
    """`ttft_p95=+20%` → `+20%`."""
    return limit.partition("=")[2].strip()


def format_interval(d: Delta) -> str:
    """The change's confidence interval in the limit's unit (`−12%…+31%`, `−5 ms…+40 ms`)."""
    if d.interval is None or d.limit is None:
        return ""
    low, high = d.interval
    if limit_change(d.limit).endswith("%"):
        # Rounded to whole percent; a tiny negative shows as +0%, not -0%.
        return "…".join(f"{v:+.0%}" if round(v * 100) else "+0%" for v in (low, high))
    if is_duration(d.metric):
        return f"{'+' if low >= 0 else '-'}{fmt_ms(abs(low))}…" \
               f"{'+' if high >= 0 else '-'}{fmt_ms(abs(high))}"
    return f"{low:+.4g}…{high:+.4g}"


def verdict_text(delta: Delta) -> str:
    """The row's verdict in words (REGRESSION, ok, not enough requests…, not checked…)."""
    if delta.regression:
        return "REGRESSION"
    if delta.unchecked:
        return f"not checked: {delta.note}"
    if delta.undecided and delta.limit is not None:
        return f"not enough requests to decide a {limit_change(delta.limit)} change"
    return delta.note or ("ok" if delta.limit else "")


def comparison(baseline: str, fail_on: str | None, deltas: Sequence[Delta],
               confidence: float = DEFAULT_CONFIDENCE) -> Comparison:
    """The comparison as stored in run.json."""
    return Comparison(baseline=baseline, fail_on=fail_on, deltas=tuple(deltas),
                      regressions=sum(d.regression for d in deltas),
                      unchecked=sum(d.unchecked for d in deltas),
                      undecided=sum(d.undecided for d in deltas), confidence=confidence)

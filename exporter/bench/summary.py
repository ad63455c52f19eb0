"""The numbers of a bench level, computed from its records alone: percentiles with
`measure.percentile` (the daemon's definitions), throughput, goodput, tokens, cost, and the knee
of a sweep."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from exporter.bench.model import (
    PERCENTILES,
    Knee,
    Latency,
    LatencyStats,
    Slo,
    Summary,
    TokenTotals,
)
from exporter.commands.cells import fmt_ms
from exporter.measure import percentile
from exporter.record import Level, LoadMode, Record
from exporter.result import ProbeResult, TokenSource, Verdict

# Doubling the load and gaining less than this much aggregate tokens/s is "stopped growing".
KNEE_MIN_GROWTH = 0.05
# A level whose success rate is this far below the first level's is past the knee, too.
KNEE_MAX_SUCCESS_DROP = 0.05


def stats(values: Sequence[float]) -> LatencyStats:
    """p50/p90/p95/p99, mean, min and max of `values` (None when empty)."""
    if not values:
        return LatencyStats()
    p50, p90, p95, p99 = (percentile(values, q) for q in PERCENTILES)
    return LatencyStats(p50=p50, p90=p90, p95=p95, p99=p99, mean=sum(values) / len(values),
                        min=min(values), max=max(values), count=len(values))


def latency_of(result: ProbeResult, latency: Latency) -> tuple[float, ...]:
    """One request's values of a latency: none, one, or every inter-chunk gap."""
    t = result.timings
    if latency is Latency.INTER_CHUNK:
        return t.inter_chunk
    value = {Latency.TTFT: t.ttft, Latency.TIME_TO_FIRST_ANSWER: t.time_to_first_answer,
             Latency.TPOT: t.tpot, Latency.TPS: t.tps, Latency.E2E: t.duration}[latency]
    return () if value is None else (value,)


def latency_values(records: Iterable[Record], latency: Latency) -> list[float]:
    """Every value of one latency over the successful records (inter-chunk gaps pooled)."""
    return [v for r in records if r.result.success for v in latency_of(r.result, latency)]


def summarize(records: Sequence[Record], *, series: tuple[str, str, str], level: Level,
              wall_seconds: float, slo: Slo, warmup: int = 0,
              complete: bool = True) -> Summary:
    """Everything one level measured, from its records."""
    ok = [r.result for r in records if r.result.success]
    results: dict[str, int] = {}
    for r in records:
        results[r.result.result.value] = results.get(r.result.result.value, 0) + 1
    tokens = TokenTotals(prompt=sum(r.usage.prompt or 0 for r in ok),
                         completion=sum(r.usage.completion or 0 for r in ok),
                         reasoning=sum(r.usage.reasoning or 0 for r in ok),
                         cached=sum(r.usage.cached or 0 for r in ok))
    output_tokens = sum(r.output_tokens for r in ok)
    costs = [r.cost for r in ok if r.cost is not None]
    currencies = tuple(sorted({r.currency for r in ok if r.currency}))
    wall = wall_seconds if wall_seconds > 0 else None
    good = sum(1 for r in ok if slo.met(r)) if slo else None
    target, model, probe = series
    judgements: dict[str, int] = {}
    for record in records:
        verdict = record.bench.judge_verdict if record.bench is not None else None
        if verdict is not None:
            judgements[verdict.value] = judgements.get(verdict.value, 0) + 1
    graded = judgements.get(Verdict.PASS, 0) + judgements.get(Verdict.FAIL, 0)
    return Summary(
        target=target, model=model, probe=probe, mode=level.mode, level=level.value,
        label=level.label, complete=complete, warmup=warmup,
        requests=len(records), succeeded=len(ok),
        success_rate=len(ok) / len(records) if records else None,
        results=dict(sorted(results.items())),
        wall_seconds=wall_seconds,
        request_throughput=len(ok) / wall if wall else None,
        output_tokens_per_second=output_tokens / wall if wall else None,
        output_tokens=output_tokens, tokens=tokens,
        cost_total=sum(costs) if costs else None,
        cost_per_call=sum(costs) / len(costs) if costs else None,
        currency=currencies[0] if len(currencies) == 1 else (currencies or None),
        slo=slo.describe() or None, slo_met=good,
        goodput=good / wall if good is not None and wall else None,
        goodput_ratio=good / len(records) if good is not None and records else None,
        latency={name: stats(latency_values(records, name)) for name in Latency},
        estimated_records=sum(r.token_source is TokenSource.ESTIMATE for r in ok),
        judgements=dict(sorted(judgements.items())),
        pass_rate=judgements.get(Verdict.PASS, 0) / graded if graded else None)


def find_knee(summaries: Sequence[Summary], threshold: float) -> Knee:
    """The highest level before p95 TTFT rises > threshold over the first level, or aggregate
    output tokens/s stops growing, or the success rate drops (one series, one mode)."""
    rows = sorted(summaries, key=lambda s: s.level)
    if not rows:
        raise ValueError("find_knee needs at least one level")
    base = rows[0]
    series, mode = base.series, base.mode
    base_p95 = base.latency[Latency.TTFT].p95
    if base_p95 is None:
        return Knee(series, mode, None, None, True,
                    f"no successful request at the first level ({base.label})")
    if len(rows) == 1:
        return Knee(series, mode, base.level, base.label, False,
                    "one level only: give several levels to find the knee")
    for prev, row in itertools.pairwise(rows):
        p95 = row.latency[Latency.TTFT].p95
        reason = None
        if p95 is None:
            reason = f"no successful request at {row.label}"
        elif p95 > base_p95 * (1 + threshold):
            reason = (f"p95 TTFT at {row.label} is {fmt_ms(p95)}, {p95 / base_p95 - 1:+.0%} "
                      f"over {base.label} ({fmt_ms(base_p95)}; threshold +{threshold:.0%})")
        elif (row.success_rate or 0) < (base.success_rate or 0) - KNEE_MAX_SUCCESS_DROP:
            reason = (f"success rate falls to {row.success_rate or 0:.0%} at {row.label} "
                      f"(from {base.success_rate or 0:.0%})")
        elif (prev.output_tokens_per_second and row.output_tokens_per_second is not None
              and row.output_tokens_per_second
              < prev.output_tokens_per_second * (1 + KNEE_MIN_GROWTH)):
            reason = (f"aggregate output tokens/s stops growing at {row.label} "
                      f"({prev.output_tokens_per_second:.0f} → "
                      f"{row.output_tokens_per_second:.0f})")
        if reason:
            return Knee(series, mode, prev.level, prev.label, True, reason)
    last = rows[-1]
    return Knee(series, mode, last.level, last.label, False,
                "no knee within the tested levels: try higher ones")


def find_knees(summaries: Sequence[Summary], threshold: float) -> list[Knee]:
    """The knee of every series and mode that has levels with requests, in summary order."""
    knees = []
    for _, group in itertools.groupby(summaries, key=lambda s: s.series):
        group_list = list(group)
        for mode in LoadMode:
            levels = [s for s in group_list if s.mode is mode and s.requests]
            if levels:
                knees.append(find_knee(levels, threshold))
    return knees

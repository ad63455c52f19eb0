"""What `bench` prints: the sweep, the distributions, totals, failures with their likely fix,
the knees and the baseline comparison."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from exporter.bench.compare import format_interval, format_value, verdict_text
from exporter.bench.model import Delta, Knee, Latency, Summary
from exporter.bench.run import LevelRun
from exporter.commands.cells import cell, estimated, fmt_cost, fmt_ms, fmt_num
from exporter.probe.hints import hint_for
from exporter.record import Record

# The latencies of the distribution table, by their titles.
TITLES = {Latency.TTFT: "TTFT", Latency.TIME_TO_FIRST_ANSWER: "first answer",
          Latency.TPOT: "TPOT", Latency.TPS: "TPS (tok/s)", Latency.E2E: "E2E",
          Latency.INTER_CHUNK: "inter-chunk gap"}


def sweep_table(summaries: Sequence[Summary], knees: Sequence[Knee], slo: str | None) -> Table:
    """One row per (series, level): the numbers people compare (◆ marks the knee)."""
    table = Table(title="bench sweep" + (f" — goodput SLO {slo}" if slo else ""),
                  title_justify="left")
    names = list(dict.fromkeys(s.series for s in summaries))
    columns = ("level", "req", "ok\n%", "TTFT\np50", "TTFT\np95", "TTFT\np99",
               "1st ans\np50", "TPOT\np50", "TPOT\np95", "TPS\np50", "E2E\np50", "E2E\np95",
               "gap\np99", "req/s", "out\ntok/s", "goodput\nreq/s", "cost/\ncall")
    for column in columns:
        table.add_column(column, justify="left" if column == "level" else "right",
                         no_wrap=True)
    knee_at = {(k.series, k.mode, k.level) for k in knees if k.reached}
    for name in names:
        rows = [s for s in summaries if s.series == name]
        if len(names) > 1:
            table.add_row(f"[bold]{escape(name)}[/bold]")
        for i, s in enumerate(rows):
            lat = s.latency
            mark = " ◆" if (name, s.mode, s.level) in knee_at else ""
            guess = s.estimated_records > 0  # TPOT and TPS divide by an estimated N
            table.add_row(
                s.label + mark, str(s.requests),
                fmt_num(None if s.success_rate is None else s.success_rate * 100, 0),
                fmt_ms(lat[Latency.TTFT].p50), fmt_ms(lat[Latency.TTFT].p95),
                fmt_ms(lat[Latency.TTFT].p99), fmt_ms(lat[Latency.TIME_TO_FIRST_ANSWER].p50),
                estimated(fmt_ms(lat[Latency.TPOT].p50), guess),
                estimated(fmt_ms(lat[Latency.TPOT].p95), guess),
                estimated(fmt_num(lat[Latency.TPS].p50), guess), fmt_ms(lat[Latency.E2E].p50),
                fmt_ms(lat[Latency.E2E].p95), fmt_ms(lat[Latency.INTER_CHUNK].p99),
                fmt_num(s.request_throughput, 2),
                estimated(fmt_num(s.output_tokens_per_second), guess),
                fmt_num(s.goodput, 2), fmt_cost(s.cost_per_call, None),
                end_section=i == len(rows) - 1)
    if len(names) == 1:
        table.title = f"{table.title} — {names[0]}"
    return table


def distribution_table(summaries: Sequence[Summary]) -> Table:
    """p50/p90/p95/p99/mean/max of every latency, per level."""
    table = Table(title="latency distributions (successful requests)", title_justify="left")
    for column in ("series", "level", "metric", "n", "p50", "p90", "p95", "p99", "mean", "max"):
        table.add_column(column, justify="left" if column in ("series", "level", "metric")
                         else "right", no_wrap=True)
    for s in summaries:
        for i, (name, title) in enumerate(TITLES.items()):
            st = s.latency[name]
            fmt: Callable[[float | None], str] = fmt_num if name is Latency.TPS else fmt_ms
            guess = name in (Latency.TPOT, Latency.TPS) and s.estimated_records > 0
            table.add_row(s.series if i == 0 else "", s.label if i == 0 else "",
                          estimated(title, guess),
                          str(st.count), *(fmt(v) for v in (st.p50, st.p90, st.p95, st.p99,
                                                            st.mean, st.max)),
                          end_section=i == len(TITLES) - 1)
    return table


def totals_table(summaries: Sequence[Summary]) -> Table:
    """Results by class (and the judge's verdicts), token totals and cost per level."""
    table = Table(title="results, tokens and cost", title_justify="left")
    for column in ("series", "level", "results", "prompt tok", "completion tok", "reasoning tok",
                   "wall", "cost/call", "cost total"):
        table.add_column(column, no_wrap=column != "results",
                         justify="right" if "tok" in column or "cost" in column
                         or column == "wall" else "left")
    for s in summaries:
        currency = s.currency if isinstance(s.currency, str) else None
        results = ", ".join(f"{k} {v}" for k, v in s.results.items())
        if s.judgements:  # a judged series: the judge's verdicts and the pass rate
            rate = "–" if s.pass_rate is None else f"{s.pass_rate:.0%}"
            results += "; judged " + ", ".join(f"{k} {v}" for k, v in s.judgements.items()) \
                + f" (pass rate {rate})"
        table.add_row(s.series, s.label, results + ("" if s.complete else " (interrupted)"),
                      str(s.tokens.prompt),
                      estimated(str(s.tokens.completion), s.estimated_records > 0),
                      estimated(str(s.tokens.reasoning), s.estimated_records > 0),
                      f"{s.wall_seconds:.2f}s", fmt_cost(s.cost_per_call, currency),
                      fmt_cost(s.cost_total, currency))
    return table


def print_failures(console: Console, runs: Sequence[LevelRun]) -> None:
    """For each failure class per level: how many, the first reason and the likely fix."""
    for run in runs:
        seen: dict[str, list[Record]] = {}
        for r in run.records:
            if not r.result.success:
                seen.setdefault(r.result.result.value, []).append(r)
        for result_value, failed in seen.items():
            first = failed[0].result
            console.print(f"[red]✗[/red] {cell(run.name)} {run.level.label}: {len(failed)} × "
                          f"[bold]{result_value}[/bold] — {cell(first.reason)}", soft_wrap=True)
            hint = hint_for(first, run.series)
            if hint:
                console.print(f"  [yellow]likely fix:[/yellow] {escape(hint)}", soft_wrap=True)


def print_knees(console: Console, knees: Sequence[Knee]) -> None:
    """One line per series: the knee and why."""
    for k in knees:
        if k.label is None:
            console.print(f"knee {k.series}: none — {k.reason}", soft_wrap=True)
        elif k.reached:
            console.print(f"[bold]knee {k.series}: {k.label}[/bold] ◆ — {k.reason}",
                          soft_wrap=True)
        else:
            console.print(f"knee {k.series}: not reached (highest tested {k.label}) — "
                          f"{k.reason}", soft_wrap=True)




def _requests(d: Delta) -> str:
    """`20`, or `10 → 140`: the requests compared, and about how many would decide."""
    if d.requests is None:
        return ""
    return f"{d.requests} → {d.requests_needed}" if d.requests_needed else str(d.requests)


def print_comparison(console: Console, deltas: Sequence[Delta],
                     confidence: float | None = None) -> None:
    """The diff table and a verdict line: regressions, limits that compared nothing, limits the
    requests could not decide, or none."""
    table = Table(title="compared with baseline", title_justify="left")
    span = f"{confidence:.0%} interval" if confidence else "interval"
    for column in ("series", "level", "metric", "baseline", "current", "change", span,
                   "requests", "limit", "verdict"):
        table.add_column(column, no_wrap=True, justify="right" if column in (
            "baseline", "current", "change", span, "requests") else "left")
    for d in deltas:
        verdict = verdict_text(d)
        if d.regression:
            verdict = f"[red bold]{verdict}[/red bold]"
        elif d.unchecked or d.undecided:
            verdict = f"[yellow]{verdict}[/yellow]"
        table.add_row(d.series, d.level, d.metric, format_value(d.metric, d.baseline),
                      format_value(d.metric, d.current),
                      "–" if d.change is None else f"{d.change:+.1%}", format_interval(d),
                      _requests(d), d.limit or "", verdict)
    console.print(table)
    regressions = [d for d in deltas if d.regression]
    unchecked = [d for d in deltas if d.unchecked]
    undecided = [d for d in deltas if d.undecided]
    if regressions:
        console.print(f"[red]{len(regressions)} regression(s) beyond --fail-on limits: "
                      + ", ".join(f"{d.series} {d.level} {d.metric}" for d in regressions)
                      + "[/red]", soft_wrap=True)
    if unchecked:
        checked = sum(1 for d in deltas if d.limit and not d.unchecked)
        what = ("nothing was compared" if not checked
                else f"{len(unchecked)} limit(s) compared nothing")
        console.print(f"[red]--fail-on: {what}, which is not a pass: "
                      + "; ".join(f"{d.series} {d.level} {d.metric} ({d.note})"
                                  for d in unchecked) + "[/red]", soft_wrap=True)
    if undecided:
        needed = max((d.requests_needed or 0 for d in undecided), default=0)
        console.print(
            f"[yellow]--fail-on: {len(undecided)} limit(s) undecided, neither pass nor fail — "
            "the change could be noise: "
            + "; ".join(f"{d.series} {d.level} {d.metric} (n={d.requests})" for d in undecided)
            + (f". Run about {needed} requests per level, in the baseline too "
               "(--requests), or widen the limit." if needed else ".")
            + "[/yellow]", soft_wrap=True)
    elif not regressions and not unchecked and any(d.limit for d in deltas):
        console.print("[green]no regression beyond the --fail-on limits[/green]")

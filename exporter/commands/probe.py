"""`probe`: run selected series once (or `--repeat N` times) with the daemon's prober.

Prints a table (or JSON with `--json`); a failed probe gets its reason and the likely fix from
`exporter.probe.hints`. Exit 0 only if every probe succeeded, 1 otherwise, 2 when nothing matched.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any, cast

import orjson
from rich.console import Console
from rich.table import Table

from exporter import __version__
from exporter.commands.cells import ESTIMATED, cell, estimated, fmt_cost, fmt_ms, make_console
from exporter.commands.selection import (
    Selection,
    discover_selected,
    probing,
    select_series,
    warn_undiscovered,
)
from exporter.config import Config, Series
from exporter.judge.engine import Grading, Judge, without_long_answer
from exporter.judge.prompt import MAX_GRADED
from exporter.log import REDACTOR
from exporter.measure import percentile
from exporter.probe.assembly import ANSWER_LIMIT
from exporter.probe.hints import hint_for
from exporter.record import SCHEMA_VERSION, Record
from exporter.result import ProbeResult, TokenSource

ANSWER_PREVIEW = 60


async def run_once(config: Config, series: Sequence[Series], repeat: int = 1,
                   judged: dict[int, Grading] | None = None) -> list[ProbeResult]:
    """Probe each series `repeat` times (rounds one after another), `max_concurrency` at a time;
    a judged series' answers are graded by its judge (`judged`: grading by result index)."""
    semaphore = asyncio.Semaphore(config.global_.max_concurrency)
    results: list[ProbeResult] = []
    async with probing(config) as prober:
        judge = Judge(prober)
        judge.apply(config)

        async def one(s: Series) -> tuple[ProbeResult, Grading | None]:
            graded = judge.judge_of(s) is not None
            async with semaphore:
                result = await prober.probe(s, answer_limit=MAX_GRADED if graded
                                            else ANSWER_LIMIT)
            grading = await judge.grade(s, result) if graded else None
            return without_long_answer(result, ANSWER_LIMIT), grading
        for _ in range(repeat):
            for result, grading in await asyncio.gather(*(one(s) for s in series)):
                if grading is not None and judged is not None:
                    judged[len(results)] = grading
                results.append(result)
    return results


def judgement_json(grading: Grading) -> dict[str, Any]:
    """A result's grading in `probe --json`."""
    judgement = grading.judgement
    return {"target": grading.judge.target, "model": grading.judge.model,
            "rubric": grading.judge.rubric_name.value,
            "case": grading.case_outcome.value if grading.case_outcome else None,
            "verdict": judgement.verdict.value if judgement else None,
            "score": judgement.score if judgement else None,
            "reason": judgement.reason if judgement else "",
            "fault": judgement.fault.value if judgement and judgement.fault else None}


def print_judgements(results: Sequence[ProbeResult], judged: dict[int, Grading],
                     console: Console | None = None) -> None:
    """One line per judged answer: the verdict, score and the judge's reason."""
    console = console or make_console()
    for index, grading in sorted(judged.items()):
        judgement = grading.judgement
        if judgement is None:
            continue
        r = results[index]
        score = "" if judgement.score is None else f" ({judgement.score:.2f})"
        color = {"pass": "green", "fail": "red"}.get(judgement.verdict.value, "yellow")
        console.print(f"[{color}]judge {judgement.verdict.value}[/{color}]{score} "
                      f"{cell('/'.join(r.key))} case {r.case} by "
                      f"{cell(grading.judge.target)}/{cell(grading.judge.model)} "
                      f"({grading.judge.rubric_name.value}): {cell(judgement.reason)}",
                      soft_wrap=True)


# ---------------------------------------------------------------------------------------------
# Rendering


def fmt_tokens(r: ProbeResult) -> str:
    """prompt/completion/reasoning and where the count came from."""
    u = r.usage
    if r.token_source is TokenSource.NONE and u.prompt is None:
        return "–"
    counts = f"{_count(u.prompt)}/{r.output_tokens}/{_count(u.reasoning)}"
    if r.token_source is TokenSource.ESTIMATE:
        return counts + ESTIMATED
    return f"{counts} ({r.token_source.value})"


def answer_cell(r: ProbeResult) -> str:
    """What a successful probe answered, on one line: its text, then each tool call as
    `name({arguments})` (only the start is read: the cell shows a preview)."""
    calls = [f"{call.name[:ANSWER_PREVIEW]}({call.arguments[:4 * ANSWER_PREVIEW]})"
             for call in r.tool_calls[:4]]
    return " ".join(" ".join((r.answer[:4 * ANSWER_PREVIEW], *calls)).split())


def _count(value: int | None) -> str:
    return "–" if value is None else str(value)


def _series_of(results: Sequence[ProbeResult],
               series: Sequence[Series]) -> dict[tuple[str, str, str], Series]:
    by_key = {s.key: s for s in series}
    return {r.key: by_key[r.key] for r in results if r.key in by_key}


def print_table(results: Sequence[ProbeResult], series: Sequence[Series] = (), *,
                repeat: int = 1, console: Console | None = None) -> None:
    """A rich table of results; every failure follows with its reason and the likely fix."""
    console = console or make_console()
    known = _series_of(results, series)
    table = Table(title="probe results", title_justify="left")
    columns = ["target", "model", "probe", *(["run"] if repeat > 1 else []), "result", "TTFT",
               "first answer", "TPOT", "tok/s", "E2E", "tokens p/c/r", "cost", "answer"]
    for column in columns:
        table.add_column(column, no_wrap=True, overflow="ellipsis",
                         max_width=24 if column == "answer" else None,
                         justify="right" if column in ("TTFT", "first answer", "TPOT", "tok/s",
                                                        "E2E", "cost") else "left")
    runs: dict[tuple[str, str, str], int] = {}
    for r in results:
        runs[r.key] = runs.get(r.key, 0) + 1
        t = r.timings
        style = "green" if r.success else "red"
        answer = answer_cell(r) if r.success else " ".join(r.reason.split())
        guess = r.token_source is TokenSource.ESTIMATE  # TPOT and TPS divide by N
        table.add_row(
            cell(r.target), cell(r.model), cell(r.probe),
            *([str(runs[r.key])] if repeat > 1 else []),
            f"[{style}]{r.result.value}[/{style}]", fmt_ms(t.ttft),
            fmt_ms(t.time_to_first_answer), estimated(fmt_ms(t.tpot), guess),
            estimated("–" if t.tps is None else f"{t.tps:.1f}", guess), fmt_ms(t.duration),
            fmt_tokens(r),
            cell(fmt_cost(r.cost, r.currency)), cell(answer, ANSWER_PREVIEW))
    console.print(table)
    if repeat > 1:
        console.print(summary_table(results))
    failures = [r for r in results if not r.success]
    for r in failures:
        status = f" (HTTP {r.status})" if r.status and r.status >= 300 else ""
        console.print(f"[red]✗[/red] {cell('/'.join(r.key))}: [bold]{r.result.value}"
                      f"[/bold]{status} — {cell(r.reason)}")
        hint = hint_for(r, known.get(r.key))
        if hint:
            console.print(f"  [yellow]likely fix:[/yellow] {cell(hint)}")
    ok = len(results) - len(failures)
    console.print(f"{ok}/{len(results)} probes succeeded")


def summary_rows(results: Sequence[ProbeResult]) -> list[dict[str, Any]]:
    """Per series over repeated runs: count, successes and the median/min/max latencies."""
    groups: dict[tuple[str, str, str], list[ProbeResult]] = {}
    for r in results:
        groups.setdefault(r.key, []).append(r)
    rows = []
    for (target, model, probe), group in groups.items():
        ok = [r for r in group if r.success]
        row: dict[str, Any] = {"target": target, "model": model, "probe": probe,
                               "runs": len(group), "succeeded": len(ok),
                               "estimated_tokens": sum(r.token_source is TokenSource.ESTIMATE
                                                       for r in ok)}
        for name, values in (
                ("ttft_seconds", [r.timings.ttft for r in ok]),
                ("time_to_first_answer_seconds", [r.timings.time_to_first_answer for r in ok]),
                ("tpot_seconds", [r.timings.tpot for r in ok]),
                ("output_tokens_per_second", [r.timings.tps for r in ok]),
                ("duration_seconds", [r.timings.duration for r in ok])):
            present = [v for v in values if v is not None]
            row[name] = {"p50": percentile(present, 50),
                         "min": min(present) if present else None,
                         "max": max(present) if present else None}
        rows.append(row)
    return rows


def summary_table(results: Sequence[ProbeResult]) -> Table:
    """The `--repeat` summary: median (min–max) per series."""
    table = Table(title="over all runs: median (min – max)", title_justify="left")
    for column in ("target", "model", "probe", "ok", "TTFT", "first answer", "TPOT", "tok/s",
                   "E2E"):
        table.add_column(column, no_wrap=True)

    def spread(stats: dict[str, float | None], tps: bool = False) -> str:
        if stats["p50"] is None:
            return "–"
        if tps:
            return f"{stats['p50']:.1f} ({stats['min']:.1f} – {stats['max']:.1f})"
        return f"{fmt_ms(stats['p50'])} ({fmt_ms(stats['min'])} – {fmt_ms(stats['max'])})"

    for row in summary_rows(results):
        guess = row["estimated_tokens"] > 0
        table.add_row(cell(row["target"]), cell(row["model"]), cell(row["probe"]),
                      f"{row['succeeded']}/{row['runs']}", spread(row["ttft_seconds"]),
                      spread(row["time_to_first_answer_seconds"]),
                      estimated(spread(row["tpot_seconds"]), guess),
                      estimated(spread(row["output_tokens_per_second"], tps=True), guess),
                      spread(row["duration_seconds"]))
    return table


def results_document(results: Sequence[ProbeResult], series: Sequence[Series],
                     repeat: int = 1, judged: dict[int, Grading] | None = None
                     ) -> dict[str, Any]:
    """The `--json` document: every result as a record (with its run and hint) and, for
    repeats, a summary."""
    known = _series_of(results, series)
    runs: dict[tuple[str, str, str], int] = {}
    items = []
    for index, r in enumerate(results):
        runs[r.key] = runs.get(r.key, 0) + 1
        grading = (judged or {}).get(index)
        items.append({**Record(r).to_json(), "run": runs[r.key],
                      "hint": hint_for(r, known.get(r.key)),
                      **({"judge": judgement_json(grading)} if grading else {})})
    return cast(dict[str, Any], REDACTOR.tree({  # a mapping comes back a dict
        "version": __version__, "schema_version": SCHEMA_VERSION,
        "ok": all(r.success for r in results), "repeat": repeat,
        "results": items, "summary": summary_rows(results) if repeat > 1 else []}))


async def run_probe_command(config: Config, selection: Selection, *, as_json: bool,
                            repeat: int = 1) -> int:
    """The `probe` command: exit 0 only if every selected probe succeeded."""
    config, listing = await discover_selected(config, selection)
    warn_undiscovered(listing)
    try:
        series = select_series(config, selection, listing)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if repeat < 1:
        print("error: --repeat must be at least 1", file=sys.stderr)
        return 2
    judged: dict[int, Grading] = {}
    results = await run_once(config, series, repeat, judged)
    if as_json:
        # Every string was redacted in the document; the text once more, as a second net.
        text = orjson.dumps(results_document(results, series, repeat, judged),
                            option=orjson.OPT_INDENT_2).decode()
        sys.stdout.write(REDACTOR.net(text) + "\n")
    else:
        print_table(results, series, repeat=repeat)
        print_judgements(results, judged)
    return 0 if all(r.success for r in results) else 1

"""`probe`: run selected series once (or `--repeat N` times) with the daemon's prober.

Prints a table (or JSON with `--json`); a failed probe gets its reason and the likely fix from
`exporter.hints`. Exit 0 only if every probe succeeded, 1 otherwise, 2 when nothing matched.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from exporter import __version__, tokens
from exporter.config import Config, Series
from exporter.hints import hint_for
from exporter.log import REDACTOR, RedactingStream
from exporter.measure import percentile
from exporter.prober import Prober
from exporter.result import ProbeResult, TokenSource
from exporter.server import result_json
from exporter.simulator import start_simulator

ANSWER_PREVIEW = 60


def select_series(config: Config, target: str | None, model: str | None,
                  probe: str | None) -> list[Series]:
    """The configured series matching the given names (None matches all)."""
    return [s for s in config.series
            if (target is None or s.target.name == target)
            and (model is None or s.model == model)
            and (probe is None or s.probe_name == probe)]


@asynccontextmanager
async def probing(config: Config, *, reuse_connections: bool = False) -> AsyncIterator[Prober]:
    """A started prober, with the embedded simulator running when the config has one."""
    REDACTOR.update(config.secrets())
    await asyncio.to_thread(tokens.warm_up)
    simulator = (await start_simulator(config.simulator, api_key=config.simulator.api_key)
                 if config.simulator else None)
    try:
        async with Prober(max_output_bytes=config.global_.max_output_bytes,
                          reuse_connections=reuse_connections) as prober:
            yield prober
    finally:
        if simulator is not None:
            await simulator.close()


async def run_once(config: Config, series: Sequence[Series],
                   repeat: int = 1) -> list[ProbeResult]:
    """Probe each series `repeat` times (rounds one after another), `max_concurrency` at a time."""
    semaphore = asyncio.Semaphore(config.global_.max_concurrency)
    results: list[ProbeResult] = []
    async with probing(config) as prober:
        async def one(s: Series) -> ProbeResult:
            async with semaphore:
                return await prober.probe(s)
        for _ in range(repeat):
            results += await asyncio.gather(*(one(s) for s in series))
    return results


# ---------------------------------------------------------------------------------------------
# Rendering


def fmt_ms(value: float | None) -> str:
    """Seconds as milliseconds for a table cell ("–" when undefined)."""
    if value is None:
        return "–"
    ms = value * 1000
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


ESTIMATED = " (est.)"  # after a figure that rests on estimated token counts


def estimated(text: str, is_estimate: bool) -> str:
    """A table cell, marked when its figure rests on estimated token counts."""
    return text + ESTIMATED if is_estimate and text != "–" else text


def fmt_tokens(r: ProbeResult) -> str:
    """prompt/completion/reasoning and where the count came from."""
    u = r.usage
    if r.token_source is TokenSource.NONE and u.prompt is None:
        return "–"
    counts = f"{_count(u.prompt)}/{r.output_tokens}/{_count(u.reasoning)}"
    if r.token_source is TokenSource.ESTIMATE:
        return counts + ESTIMATED
    return f"{counts} ({r.token_source.value})"


def _count(value: int | None) -> str:
    return "–" if value is None else str(value)


def fmt_cost(cost: float | None, currency: str | None) -> str:
    """A cost with enough digits for a single cheap call."""
    if cost is None:
        return "–"
    return f"{cost:.6f} {currency or ''}".rstrip()


def _series_of(results: Sequence[ProbeResult],
               series: Sequence[Series]) -> dict[tuple[str, str, str], Series]:
    by_key = {s.key: s for s in series}
    return {r.key: by_key[r.key] for r in results if r.key in by_key}


def make_console(file: Any = None) -> Console:
    """A console wide enough for the tables, also when stdout is not a terminal; what it
    prints passes the redactor once more (every cell was redacted before markup)."""
    console = Console(file=file)
    return Console(file=RedactingStream(file), width=max(console.width, 180))


def _cell(text: str, limit: int | None = None) -> str:
    """A table cell or message part from any string: redacted (then cut), then markup-escaped."""
    return escape(REDACTOR(text) if limit is None else REDACTOR.clip(text, limit))


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
        answer = (r.answer if r.success else r.reason).strip().replace("\n", " ")
        guess = r.token_source is TokenSource.ESTIMATE  # TPOT and TPS divide by N
        table.add_row(
            _cell(r.target), _cell(r.model), _cell(r.probe),
            *([str(runs[r.key])] if repeat > 1 else []),
            f"[{style}]{r.result.value}[/{style}]", fmt_ms(t.ttft),
            fmt_ms(t.time_to_first_answer), estimated(fmt_ms(t.tpot), guess),
            estimated("–" if t.tps is None else f"{t.tps:.1f}", guess), fmt_ms(t.duration),
            fmt_tokens(r),
            _cell(fmt_cost(r.cost, r.currency)), _cell(answer, ANSWER_PREVIEW))
    console.print(table)
    if repeat > 1:
        console.print(summary_table(results))
    failures = [r for r in results if not r.success]
    for r in failures:
        status = f" (HTTP {r.status})" if r.status and r.status >= 300 else ""
        console.print(f"[red]✗[/red] {_cell('/'.join(r.key))}: [bold]{r.result.value}"
                      f"[/bold]{status} — {_cell(r.reason)}")
        hint = hint_for(r, known.get(r.key))
        if hint:
            console.print(f"  [yellow]likely fix:[/yellow] {_cell(hint)}")
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

    def cell(stats: dict[str, float | None], tps: bool = False) -> str:
        if stats["p50"] is None:
            return "–"
        if tps:
            return f"{stats['p50']:.1f} ({stats['min']:.1f} – {stats['max']:.1f})"
        return f"{fmt_ms(stats['p50'])} ({fmt_ms(stats['min'])} – {fmt_ms(stats['max'])})"

    for row in summary_rows(results):
        guess = row["estimated_tokens"] > 0
        table.add_row(_cell(row["target"]), _cell(row["model"]), _cell(row["probe"]),
                      f"{row['succeeded']}/{row['runs']}", cell(row["ttft_seconds"]),
                      cell(row["time_to_first_answer_seconds"]),
                      estimated(cell(row["tpot_seconds"]), guess),
                      estimated(cell(row["output_tokens_per_second"], tps=True), guess),
                      cell(row["duration_seconds"]))
    return table


def results_document(results: Sequence[ProbeResult], series: Sequence[Series],
                     repeat: int = 1) -> dict[str, Any]:
    """The `--json` document: every result (with its hint) and, for repeats, a summary."""
    known = _series_of(results, series)
    runs: dict[tuple[str, str, str], int] = {}
    items = []
    for r in results:
        runs[r.key] = runs.get(r.key, 0) + 1
        items.append({**result_json(r), "run": runs[r.key], "hint": hint_for(r, known.get(r.key)),
                      "inter_chunk_seconds": list(r.timings.inter_chunk)})
    return REDACTOR.tree({
        "version": __version__, "ok": all(r.success for r in results), "repeat": repeat,
        "results": items, "summary": summary_rows(results) if repeat > 1 else []})


async def run_probe_command(config: Config, *, target: str | None, model: str | None,
                            probe: str | None, as_json: bool, repeat: int = 1) -> int:
    """The `probe` command: exit 0 only if every selected probe succeeded."""
    series = select_series(config, target, model, probe)
    if not series:
        print("error: no configured series matches the selection "
              f"(target={target or '*'}, model={model or '*'}, probe={probe or '*'})",
              file=sys.stderr)
        return 2
    if repeat < 1:
        print("error: --repeat must be at least 1", file=sys.stderr)
        return 2
    results = await run_once(config, series, repeat)
    if as_json:
        # Every string was redacted in the document; the text once more, as a second net.
        text = orjson.dumps(results_document(results, series, repeat),
                            option=orjson.OPT_INDENT_2).decode()
        sys.stdout.write(REDACTOR.net(text) + "\n")
    else:
        print_table(results, series, repeat=repeat)
    return 0 if all(r.success for r in results) else 1

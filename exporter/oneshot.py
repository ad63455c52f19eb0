"""`probe`: run selected series once with the daemon's prober and print a table (or JSON)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import orjson

from exporter.config import Config, Series
from exporter.log import REDACTOR
from exporter.prober import Prober
from exporter.result import ProbeResult
from exporter.server import result_json


def select_series(config: Config, target: str | None, model: str | None,
                  probe: str | None) -> list[Series]:
    """The configured series matching the given names (None matches all)."""
    return [s for s in config.series
            if (target is None or s.target.name == target)
            and (model is None or s.model == model)
            and (probe is None or s.probe_name == probe)]


@asynccontextmanager
async def probing(config: Config) -> AsyncIterator[Prober]:
    """A started prober, with the embedded simulator running when the config has one."""
    from exporter.simulator import start_simulator

    REDACTOR.update(config.secrets())
    simulator = await start_simulator(config.simulator) if config.simulator else None
    try:
        async with Prober(max_output_bytes=config.global_.max_output_bytes) as prober:
            yield prober
    finally:
        if simulator is not None:
            await simulator.close()


async def run_once(config: Config, series: Sequence[Series]) -> list[ProbeResult]:
    """Probe each series once, at most `max_concurrency` at a time."""
    semaphore = asyncio.Semaphore(config.global_.max_concurrency)
    async with probing(config) as prober:
        async def one(s: Series) -> ProbeResult:
            async with semaphore:
                return await prober.probe(s)
        return list(await asyncio.gather(*(one(s) for s in series)))


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:.0f} ms"


def print_table(results: Sequence[ProbeResult]) -> None:
    """A rich table of results, reasons in plain words below failed rows."""
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for column in ("target", "model", "probe", "result", "TTFT", "first answer", "TPOT",
                   "tok/s", "E2E", "tokens p/c/r", "cost", "answer"):
        table.add_column(column, no_wrap=column not in ("answer",))
    for r in results:
        t = r.timings
        style = "green" if r.success else "red"
        tokens = (f"{r.usage.prompt or 0}/{r.output_tokens}/{r.usage.reasoning or 0}"
                  + (" est." if r.token_source.value == "estimate" else ""))
        cost = "–" if r.cost is None else f"{r.cost:.6f} {r.currency}"
        answer = r.answer[:60].replace("\n", " ") if r.success else r.reason
        table.add_row(r.target, r.model, r.probe, f"[{style}]{r.result.value}[/{style}]",
                      _ms(t.ttft), _ms(t.time_to_first_answer), _ms(t.tpot),
                      "–" if t.tps is None else f"{t.tps:.1f}", _ms(t.duration), tokens, cost,
                      answer)
    Console(width=max(Console().width, 160)).print(table)


async def run_probe_command(config: Config, *, target: str | None, model: str | None,
                            probe: str | None, as_json: bool) -> int:
    """The `probe` command: exit 0 only if every selected probe succeeded."""
    series = select_series(config, target, model, probe)
    if not series:
        print("error: no configured series matches the selection", file=sys.stderr)
        return 2
    results = await run_once(config, series)
    if as_json:
        sys.stdout.write(REDACTOR(orjson.dumps([result_json(r) for r in results],
                                               option=orjson.OPT_INDENT_2).decode()) + "\n")
    else:
        print_table(results)
    return 0 if all(r.success for r in results) else 1

"""The `bench` command: run, print, compare with a baseline, write the files, and the exit code."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson

from exporter.bench.ceiling import run_ceiling
from exporter.bench.compare import LEVEL_MISSING, compare, comparison
from exporter.bench.gate import DEFAULT_CONFIDENCE
from exporter.bench.model import BenchOptions, RunDocument, Summary
from exporter.bench.options import parse_fail_on
from exporter.bench.output import write_csv, write_json, write_report
from exporter.bench.run import run_bench
from exporter.bench.tables import (
    distribution_table,
    print_comparison,
    print_failures,
    print_knees,
    sweep_table,
    totals_table,
)
from exporter.commands.cells import cell, make_console
from exporter.commands.selection import (
    Selection,
    discover_selected,
    select_series,
    warn_undiscovered,
    with_input_sizes,
)
from exporter.config import Config
from exporter.files import read_limited

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNDECIDED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
MAX_BASELINE_BYTES = 512 * 1024 * 1024  # a run.json with every raw record of a long run


@dataclass(frozen=True)
class BenchOutputs:
    """Where to write results and what to compare with."""

    output: Path | None = None
    csv: Path | None = None
    report: Path | None = None
    baseline: Path | None = None
    fail_on: str | None = None
    confidence: float = DEFAULT_CONFIDENCE


def read_baseline(path: Path) -> RunDocument:
    """A baseline run.json of any schema version (OSError, or ValueError saying what is wrong)."""
    try:
        data = orjson.loads(read_limited(path, MAX_BASELINE_BYTES))
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"baseline {path}: not JSON ({exc})") from None
    return RunDocument.from_json(data, f"baseline {path}")


async def run_bench_command(config: Config, selection: Selection, *, options: BenchOptions,
                            outputs: BenchOutputs, yes: bool = False,
                            input_tokens: tuple[int, ...] = ()) -> int:
    """The `bench` command; exit 0, 1 (a regression, a `--fail-on` limit that compared nothing,
    or nothing succeeded), 2 (usage, or a run that may pass the budget without `yes`), 3 (a
    `--fail-on` limit the requests were too few to decide, and nothing failed), 130
    (interrupted). `input_tokens`: sweep these generated prompt sizes."""
    config, listing = await discover_selected(config, selection)
    warn_undiscovered(listing)
    try:
        series = select_series(config, selection, listing)
        config, series = with_input_sizes(config, series, input_tokens)
        rules = parse_fail_on(outputs.fail_on)
        baseline = read_baseline(outputs.baseline) if outputs.baseline is not None else None
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if rules and baseline is None:
        print("error: --fail-on needs --baseline", file=sys.stderr)
        return EXIT_USAGE
    console = make_console()
    ceiling = run_ceiling(series, options, config)
    console.print(cell(ceiling.describe()), soft_wrap=True)
    budget = config.global_.budget
    if budget is not None and ceiling.over(budget) and not yes:
        print(f"error: this run may cost more than global.budget "
              f"({budget.max_cost_per_day:g} {budget.currency}/day); lower --requests or "
              "--concurrency, or pass --yes", file=sys.stderr)
        return EXIT_USAGE
    document, runs = await run_bench(config, series, options)
    summaries = document.summaries
    console.print(sweep_table(summaries, document.knees, options.slo.describe() or None))
    console.print(distribution_table(summaries))
    console.print(totals_table(summaries))
    print_failures(console, runs)
    print_knees(console, document.knees)
    if document.interrupted:
        console.print("[yellow]interrupted: results cover the requests that finished[/yellow]")
    code = EXIT_OK
    if baseline is not None and outputs.baseline is not None:
        deltas = compare(baseline.summaries, summaries, rules, baseline_records=baseline.records,
                         current_records=document.records, confidence=outputs.confidence)
        result = comparison(str(outputs.baseline), outputs.fail_on, deltas, outputs.confidence)
        document = dataclasses.replace(document, comparison=result)
        print_comparison(console, deltas, outputs.confidence)
        if any(d.unchecked and d.note == LEVEL_MISSING for d in deltas):
            console.print(f"the baseline has: {_levels(baseline.summaries)}", soft_wrap=True)
        if result.regressions or result.unchecked:
            code = EXIT_FAILED
        elif result.undecided:
            code = EXIT_UNDECIDED
    data = document.to_json() if outputs.output or outputs.csv else {}
    if outputs.output is not None:
        write_json(outputs.output, data)
        console.print(f"wrote {outputs.output}")
    if outputs.csv is not None:
        write_csv(outputs.csv, data["records"])
        console.print(f"wrote {outputs.csv} ({len(document.records)} rows)")
    if outputs.report is not None:
        write_report(outputs.report, document)
        console.print(f"wrote {outputs.report}")
    if document.interrupted:
        return EXIT_INTERRUPTED
    if not any(s.succeeded for s in summaries):
        console.print("[red]no request succeeded[/red]")
        return EXIT_FAILED
    return code


def _levels(summaries: tuple[Summary, ...]) -> str:
    """`a/b/c c=1, c=2; d/e/f r=2/s` (none: nothing)."""
    by_series: dict[str, list[str]] = {}
    for s in summaries:
        by_series.setdefault(s.series, []).append(s.label)
    return "; ".join(f"{name} {', '.join(labels)}" for name, labels in by_series.items()) \
        or "no levels"

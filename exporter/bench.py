"""`bench`: load levels against one or more series with the daemon's prober, then summarise.

Closed loop (`--concurrency 1,2,4`): K requests stay in flight; a new one starts the moment one
ends (never lock-step rounds, which would measure a K-wide burst each time). Open loop
(`--rate 2,4`): requests start at Poisson arrival times whatever is still in flight. Each level
runs `--requests N` requests (or for `--duration`), after `--warmup K` uncounted ones run the same
way (they open the connections the level will use). How levels run — the loops, the ramp, the
`--workers` processes — lives in `exporter.loadgen`; connections are pooled unless
`--connections fresh`.

Every number comes from `Prober.probe` and `measure.percentile`: the definitions are the daemon's.
Raw per-request records are kept; summaries, the knee, CSV, the HTML report and baseline
comparisons are all computed from those records.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import itertools
import math
import random
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from exporter import __version__
from exporter.config import Config, Series, parse_duration, redacted
from exporter.hints import hint_for
from exporter.loadgen import (
    SWITCH_INTERVAL,
    Level,
    LevelDriver,
    LevelPlan,
    LocalDriver,
    WorkerPool,
    steady_gc,
)
from exporter.log import REDACTOR
from exporter.measure import percentile
from exporter.oneshot import estimated, fmt_cost, fmt_ms, make_console, probing, select_series
from exporter.result import ProbeResult, ProbeStamps
from exporter.server import result_json

DEFAULT_REQUESTS = 20
PERCENTILES = (50, 90, 95, 99)
# Per-request latency fields of a record, by the short name summaries and `--fail-on` use.
LATENCIES = {
    "ttft": "ttft_seconds",
    "time_to_first_answer": "time_to_first_answer_seconds",
    "tpot": "tpot_seconds",
    "tps": "output_tokens_per_second",
    "e2e": "duration_seconds",
    "inter_chunk": "inter_chunk_seconds",  # a list per record: every gap is pooled
}
# Doubling the load and gaining less than this much aggregate tokens/s is "stopped growing".
KNEE_MIN_GROWTH = 0.05
# A level whose success rate is this far below the first level's is past the knee, too.
KNEE_MAX_SUCCESS_DROP = 0.05
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


# ---------------------------------------------------------------------------------------------
# Options


@dataclass(frozen=True)
class Slo:
    """Service-level objectives for goodput: upper bounds on latencies, lower bound on TPS."""

    ttft: float | None = None
    time_to_first_answer: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    tps: float | None = None  # minimum

    def __bool__(self) -> bool:
        return any(v is not None for v in asdict(self).values())

    def met(self, record: Mapping[str, Any]) -> bool:
        """Whether a successful record meets every objective (an undefined value passes)."""
        if record["result"] != "success":
            return False
        for name in ("ttft", "time_to_first_answer", "tpot", "e2e"):
            limit, value = getattr(self, name), record[LATENCIES[name]]
            if limit is not None and value is not None and value > limit:
                return False
        value = record[LATENCIES["tps"]]
        return self.tps is None or value is None or value >= self.tps

    def describe(self) -> str:
        """`ttft≤500ms, tpot≤50ms` style text."""
        parts = []
        for name, limit in asdict(self).items():
            if limit is not None:
                parts.append(f"tps≥{limit:g}" if name == "tps" else f"{name}≤{fmt_ms(limit)}")
        return ", ".join(parts)


_SLO_ALIASES = {"ttft": "ttft", "tfa": "time_to_first_answer",
                "time_to_first_answer": "time_to_first_answer", "tpot": "tpot", "e2e": "e2e",
                "duration": "e2e", "tps": "tps"}


def parse_slo(text: str | None) -> Slo:
    """Parse `ttft=500ms,tpot=50ms,e2e=10s[,tps=20]` (durations as in the config)."""
    if not text:
        return Slo()
    values: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        key = _SLO_ALIASES.get(name.strip().lower())
        if not sep or key is None:
            raise ValueError(f"--slo: {part.strip()!r}: use name=value with name one of "
                             "ttft, tfa, tpot, e2e (durations) or tps (tokens/s)")
        values[key] = float(value) if key == "tps" else parse_duration(value.strip())
    return Slo(**values)


def parse_levels(text: str, *, integer: bool) -> tuple[float, ...]:
    """Parse `1,2,4,8` (concurrency) or `0.5,2` (rates), each > 0, in the order given."""
    levels: list[float] = []
    for part in text.split(","):
        part = part.strip()
        try:
            value: float = int(part) if integer else float(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a {'whole ' if integer else ''}number") from None
        if value <= 0 or not math.isfinite(value):
            raise ValueError(f"{part!r}: must be greater than 0")
        levels.append(value)
    return tuple(levels)


class Connections(StrEnum):
    """How bench's requests get their connections (`--connections`)."""

    REUSE = "reuse"  # a keep-alive pool, as real clients do
    FRESH = "fresh"  # a new TCP (+TLS) connection per request, as the daemon's probes do


@dataclass(frozen=True)
class BenchOptions:
    """What to run: levels, requests, warm-up, SLOs, the knee threshold, connections, workers."""

    levels: tuple[Level, ...] = (Level("concurrency", 1),)
    requests: int | None = DEFAULT_REQUESTS
    duration: float | None = None
    warmup: int = 1
    slo: Slo = field(default_factory=Slo)
    knee_threshold: float = 0.5
    seed: int | None = None
    connections: Connections = Connections.REUSE
    workers: int = 1
    ramp: float | None = None  # seconds; None: the warm-up's mean request duration

    @property
    def plan(self) -> LevelPlan:
        """How much of each level to run."""
        return LevelPlan(self.requests, self.duration, self.warmup, self.ramp)

    def as_json(self) -> dict[str, Any]:
        """The options as stored in run.json."""
        return {"levels": [{"mode": lv.mode, "value": lv.value} for lv in self.levels],
                "requests": self.requests, "duration": self.duration, "warmup": self.warmup,
                "slo": {k: v for k, v in asdict(self.slo).items() if v is not None},
                "knee_threshold": self.knee_threshold, "seed": self.seed,
                "connections": self.connections.value, "workers": self.workers,
                "ramp": "auto" if self.ramp is None else self.ramp}


# ---------------------------------------------------------------------------------------------
# Running


def series_name(series: Series | Mapping[str, Any]) -> str:
    """`target/model/probe`."""
    if isinstance(series, Series):
        return "/".join(series.key)
    return f"{series['target']}/{series['model']}/{series['probe']}"


# The stamps of a record, by their names in DESIGN.md (t_h, t_f, t_a, t_L).
STAMPS = {"t0": "t0", "t_h": "t_headers", "t_f": "t_first", "t_a": "t_answer", "t_L": "t_last",
          "t_end": "t_end"}
# What the `monotonic` stamps are: `time.perf_counter`, system-wide on Linux.
CLOCK = {"monotonic": "clock_gettime(CLOCK_MONOTONIC), seconds (Python time.perf_counter: "
                      f"{time.get_clock_info('perf_counter').implementation})",
         "unix": "wall time, seconds since the epoch (read with the monotonic clock once per "
                 "request)"}


def stamps_json(stamps: ProbeStamps | None) -> dict[str, dict[str, float | None]]:
    """`{"monotonic": {"t0": …, "t_h": …}, "unix": {…}}`; a stamp never taken is null."""
    if stamps is None:
        return {"monotonic": dict.fromkeys(STAMPS), "unix": dict.fromkeys(STAMPS)}
    monotonic = {name: getattr(stamps, attr) for name, attr in STAMPS.items()}
    return {"monotonic": monotonic,
            "unix": {name: stamps.unix(value) for name, value in monotonic.items()}}


def make_record(result: ProbeResult, level: Level, index: int, start: float, end: float,
                slo: Slo) -> dict[str, Any]:
    """One raw per-request record: the daemon's result fields plus where it ran in the level."""
    record = result_json(result)
    record.update(
        mode=level.mode, level=level.value, index=index,
        offset_start=start, offset_end=end,  # seconds since the level began (monotonic clock)
        inter_chunk_seconds=list(result.timings.inter_chunk),
        stamps=stamps_json(result.stamps),
    )
    record["slo_met"] = slo.met(record) if slo else None
    return record


@dataclass
class LevelRun:
    """The records of one (series, level) and when it ran."""

    series: Series
    level: Level
    records: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0
    started_at: float = 0.0
    warmup: int = 0
    complete: bool = False


class _Reporter:
    """Progress for humans: a rich bar per level on a terminal, plain lines otherwise."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._live = console.is_terminal
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
            console=console, refresh_per_second=4, transient=False)
        self._task: Any = None

    def __enter__(self) -> _Reporter:
        if self._live:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live:
            self._progress.stop()

    def start(self, name: str, level: Level, total: int | None, warmup: int) -> None:
        """A level begins."""
        description = f"{name} {level.label}"
        if self._live:
            self._task = self._progress.add_task(description, total=total, status="warm-up"
                                                 if warmup else "")
        else:
            amount = f"{total} requests" if total is not None else "until the duration ends"
            self._console.print(f"bench: {description}: {amount}"
                                + (f" after {warmup} warm-up" if warmup else ""), soft_wrap=True)

    def measuring(self) -> None:
        """Warm-up is over."""
        if self._live and self._task is not None:
            self._progress.update(self._task, status="")

    def advance(self, done: int, ok: int) -> None:
        """One request finished."""
        if self._live and self._task is not None:
            self._progress.update(self._task, completed=done,
                                  status=f"ok {ok}" + (f" · failed {done - ok}" if done > ok
                                                       else ""))

    def finish(self, run: LevelRun, interrupted: bool) -> None:
        """A level ended."""
        ok = sum(1 for r in run.records if r["result"] == "success")
        if self._live and self._task is not None:
            self._progress.update(self._task, total=len(run.records),
                                  completed=len(run.records),
                                  status=f"ok {ok}" + (" · interrupted" if interrupted else ""))
        else:
            self._console.print(
                f"bench: {series_name(run.series)} {run.level.label}: {len(run.records)} "
                f"done, {ok} ok in {run.wall_seconds:.1f}s"
                + (" (interrupted)" if interrupted else ""), soft_wrap=True)


class Bench:
    """Runs every (series × level) and keeps what finished, also when interrupted."""

    def __init__(self, driver: LevelDriver, options: BenchOptions, reporter: _Reporter, *,
                 clock: Callable[[], float] = time.perf_counter,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self._driver = driver
        self._options = options
        self._reporter = reporter
        self._clock = clock
        self._wall = wall_clock
        self.runs: list[LevelRun] = []
        self.interrupted = False
        self._current: asyncio.Task[None] | None = None

    def interrupt(self) -> None:
        """Stop now (Ctrl-C): cancel in-flight requests, keep every finished one."""
        self.interrupted = True
        if self._current is not None:
            self._current.cancel()

    async def run(self, series: Sequence[Series]) -> None:
        """Every level of every series, in order, until done or interrupted."""
        for s in series:
            for level in self._options.levels:
                if self.interrupted:
                    return
                await self._level(s, level)

    async def _level(self, series: Series, level: Level) -> None:
        options = self._options
        run = LevelRun(series, level, warmup=options.warmup)
        self.runs.append(run)
        self._reporter.start(series_name(series), level, options.requests, options.warmup)
        ok = 0

        def on_done(index: int, result: ProbeResult, start: float, end: float) -> None:
            nonlocal ok
            run.records.append(make_record(result, level, index, start, end, options.slo))
            ok += result.success
            self._reporter.advance(len(run.records), ok)

        origin = 0.0

        def measuring() -> None:
            nonlocal origin
            if options.warmup:
                self._reporter.measuring()
            run.started_at = self._wall()
            origin = self._clock()

        async def body() -> None:
            try:
                await self._driver.run_level(series, level, options.plan, on_done, measuring)
            finally:
                run.wall_seconds = self._clock() - origin if origin else 0.0

        self._current = asyncio.create_task(body())
        await asyncio.wait([self._current])
        task, self._current = self._current, None
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        run.complete = not task.cancelled()
        # In start order (several workers report as they finish, each counting on its own).
        run.records.sort(key=lambda r: (r["offset_start"], r["index"]))
        for index, record in enumerate(run.records):
            record["index"] = index
        self._reporter.finish(run, interrupted=task.cancelled())


# ---------------------------------------------------------------------------------------------
# Summaries (pure functions of the records)


def stats(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p90/p95/p99, mean, min and max of `values` (None when empty)."""
    out: dict[str, float | int | None] = {f"p{q}": percentile(values, q) for q in PERCENTILES}
    out["mean"] = sum(values) / len(values) if values else None
    out["min"] = min(values) if values else None
    out["max"] = max(values) if values else None
    out["count"] = len(values)
    return out


def latency_values(records: Iterable[Mapping[str, Any]], name: str) -> list[float]:
    """Every value of one latency over successful records (inter-chunk gaps pooled)."""
    key = LATENCIES[name]
    values: list[float] = []
    for record in records:
        if record["result"] != "success":
            continue
        value = record[key]
        if isinstance(value, list):
            values.extend(value)
        elif value is not None:
            values.append(value)
    return values


def summarize(records: Sequence[Mapping[str, Any]], *, series: Mapping[str, str], level: Level,
              wall_seconds: float, slo: Slo, warmup: int = 0,
              complete: bool = True) -> dict[str, Any]:
    """Everything one level measured, from its raw records."""
    ok = [r for r in records if r["result"] == "success"]
    results: dict[str, int] = {}
    for r in records:
        results[r["result"]] = results.get(r["result"], 0) + 1
    tokens = {kind: sum((r["tokens"][kind] or 0) for r in ok)
              for kind in ("prompt", "completion", "reasoning", "cached")}
    output_tokens = sum(r["output_tokens"] for r in ok)
    # Output token counts a server without usage left to our estimate: TPOT and TPS rest on them.
    estimated_records = sum(r["token_source"] == "estimate" for r in ok)
    costs = [r["cost"] for r in ok if r["cost"] is not None]
    currencies = sorted({r["currency"] for r in ok if r["currency"]})
    wall = wall_seconds if wall_seconds > 0 else None
    good = sum(1 for r in ok if slo.met(r)) if slo else None
    return {
        **series, "mode": level.mode, "level": level.value, "label": level.label,
        "complete": complete, "warmup": warmup,
        "requests": len(records), "succeeded": len(ok),
        "success_rate": len(ok) / len(records) if records else None,
        "results": dict(sorted(results.items())),
        "wall_seconds": wall_seconds,
        "request_throughput": len(ok) / wall if wall else None,
        "output_tokens_per_second": output_tokens / wall if wall else None,
        "output_tokens": output_tokens,
        "estimated_records": estimated_records,
        "tokens": tokens,
        "cost_total": sum(costs) if costs else None,
        "cost_per_call": sum(costs) / len(costs) if costs else None,
        "currency": currencies[0] if len(currencies) == 1 else (currencies or None),
        "slo": slo.describe() or None,
        "slo_met": good,
        "goodput": good / wall if good is not None and wall else None,
        "goodput_ratio": good / len(records) if good is not None and records else None,
        "latency": {name: stats(latency_values(ok, name)) for name in LATENCIES},
    }


def flat_metrics(summary: Mapping[str, Any]) -> dict[str, float | None]:
    """The summary as `ttft_p95`, `success_rate`, `cost`… (the names `--fail-on` takes)."""
    out: dict[str, float | None] = {
        "success_rate": summary["success_rate"],
        "throughput": summary["request_throughput"],
        "output_tps": summary["output_tokens_per_second"],
        "goodput": summary["goodput"],
        "goodput_ratio": summary["goodput_ratio"],
        "cost": summary["cost_per_call"],
        "cost_total": summary["cost_total"],
    }
    for name, values in summary["latency"].items():
        for stat, value in values.items():
            if stat != "count":
                out[f"{name}_{stat}"] = value
    out.update({f"tfa_{k.removeprefix('time_to_first_answer_')}": v for k, v in list(out.items())
                if k.startswith("time_to_first_answer_")})
    return out


def find_knee(summaries: Sequence[Mapping[str, Any]], threshold: float) -> dict[str, Any]:
    """The highest level before p95 TTFT rises > threshold over the first level, or aggregate
    output tokens/s stops growing, or the success rate drops (levels in increasing order)."""
    rows = sorted(summaries, key=lambda s: s["level"])
    if not rows:
        return {"level": None, "label": None, "reached": False, "reason": "no levels ran"}
    base = rows[0]
    base_p95 = base["latency"]["ttft"]["p95"]
    if base_p95 is None:
        return {"level": None, "label": None, "reached": True,
                "reason": f"no successful request at the first level ({base['label']})"}
    if len(rows) == 1:
        return {"level": base["level"], "label": base["label"], "reached": False,
                "reason": "one level only: give several levels to find the knee"}
    for prev, row in itertools.pairwise(rows):
        p95 = row["latency"]["ttft"]["p95"]
        reason = None
        if p95 is None:
            reason = f"no successful request at {row['label']}"
        elif p95 > base_p95 * (1 + threshold):
            reason = (f"p95 TTFT at {row['label']} is {fmt_ms(p95)}, {p95 / base_p95 - 1:+.0%} "
                      f"over {base['label']} ({fmt_ms(base_p95)}; threshold +{threshold:.0%})")
        elif (row["success_rate"] or 0) < (base["success_rate"] or 0) - KNEE_MAX_SUCCESS_DROP:
            reason = (f"success rate falls to {row['success_rate']:.0%} at {row['label']} "
                      f"(from {base['success_rate']:.0%})")
        elif (prev["output_tokens_per_second"] and row["output_tokens_per_second"] is not None
              and row["output_tokens_per_second"]
              < prev["output_tokens_per_second"] * (1 + KNEE_MIN_GROWTH)):
            reason = (f"aggregate output tokens/s stops growing at {row['label']} "
                      f"({prev['output_tokens_per_second']:.0f} → "
                      f"{row['output_tokens_per_second']:.0f})")
        if reason:
            return {"level": prev["level"], "label": prev["label"], "mode": prev["mode"],
                    "reached": True, "reason": reason}
    last = rows[-1]
    return {"level": last["level"], "label": last["label"], "mode": last["mode"],
            "reached": False, "reason": "no knee within the tested levels: try higher ones"}


def build_document(config: Config, options: BenchOptions, runs: Sequence[LevelRun], *,
                   started_at: float, finished_at: float, interrupted: bool) -> dict[str, Any]:
    """run.json: config (secrets removed), version, timestamps, raw records, summaries, knees."""
    summaries: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for run in runs:
        if not run.records and not run.complete:
            continue  # interrupted before anything finished
        key = dict(zip(("target", "model", "probe"), run.series.key, strict=True))
        for record in run.records:
            records.append(record)  # result_json already carries target/model/probe
        summaries.append(summarize(run.records, series=key, level=run.level,
                                   wall_seconds=run.wall_seconds, slo=options.slo,
                                   warmup=run.warmup, complete=run.complete))
    knees = []
    for name, group in itertools.groupby(summaries, key=series_name):
        group_list = list(group)
        for mode in ("concurrency", "rate"):
            levels = [s for s in group_list if s["mode"] == mode and s["requests"]]
            if levels:
                knee = find_knee(levels, options.knee_threshold)
                knees.append({"series": name, "mode": mode, **knee})
    return {
        "kind": "llm-probe-exporter bench", "version": __version__,
        "started_at": started_at, "finished_at": finished_at,
        "started": _iso(started_at), "finished": _iso(finished_at),
        "interrupted": interrupted, "options": options.as_json(), "clock": CLOCK,
        "config": redacted(config), "summaries": summaries, "knees": knees,
        "records": records,
    }


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------------
# Output


CSV_FIELDS = (
    "target", "model", "probe", "mode", "level", "index", "started_at", "offset_start",
    "offset_end", "result", "status", "reason", "ttft_seconds", "time_to_first_answer_seconds",
    "tpot_seconds", "output_tokens_per_second", "duration_seconds", "chunks",
    "inter_chunk_max_seconds", "output_tokens", "token_source", "prompt_tokens",
    "completion_tokens", "reasoning_tokens", "cached_tokens", "cost", "currency", "slo_met",
    "finish_reason", "response_id",
    *(f"{name}_{clock}" for clock in ("monotonic", "unix") for name in STAMPS),
)


def write_csv(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """One row per request; every cell redacted before quoting, the text once more."""
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for r in records:
        gaps = r["inter_chunk_seconds"]
        row = {**r, "inter_chunk_max_seconds": max(gaps) if gaps else None,
               **{f"{k}_tokens": v for k, v in r["tokens"].items()},
               **{f"{name}_{clock}": value for clock, values in r["stamps"].items()
                  for name, value in values.items()}}
        writer.writerow({k: REDACTOR(v) if isinstance(v, str) else v
                         for k, v in row.items() if k in CSV_FIELDS})
    path.write_text(REDACTOR.net(out.getvalue()), encoding="utf-8", newline="")


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    """run.json: every string redacted before serialising, the text once more."""
    text = orjson.dumps(REDACTOR.tree(document), option=orjson.OPT_INDENT_2).decode()
    path.write_text(REDACTOR.net(text) + "\n", encoding="utf-8")


def write_report(path: Path, document: Mapping[str, Any]) -> None:
    """The HTML report: rendered from a redacted document (each value is also redacted before
    escaping), the page once more."""
    from exporter.report import render_report

    path.write_text(REDACTOR.net(render_report(REDACTOR.tree(document))), encoding="utf-8")


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def sweep_table(summaries: Sequence[Mapping[str, Any]], knees: Sequence[Mapping[str, Any]],
                slo: str | None) -> Table:
    """One row per (series, level): the numbers people compare (◆ marks the knee)."""
    table = Table(title="bench sweep" + (f" — goodput SLO {slo}" if slo else ""),
                  title_justify="left")
    names = list(dict.fromkeys(series_name(s) for s in summaries))
    columns = ("level", "req", "ok\n%", "TTFT\np50", "TTFT\np95", "TTFT\np99",
               "1st ans\np50", "TPOT\np50", "TPOT\np95", "TPS\np50", "E2E\np50", "E2E\np95",
               "gap\np99", "req/s", "out\ntok/s", "goodput\nreq/s", "cost/\ncall")
    for column in columns:
        table.add_column(column, justify="left" if column == "level" else "right",
                         no_wrap=True)
    knee_at = {(k["series"], k.get("mode"), k["level"]) for k in knees if k["reached"]}
    for name in names:
        rows = [s for s in summaries if series_name(s) == name]
        if len(names) > 1:
            table.add_row(f"[bold]{escape(name)}[/bold]")
        for i, s in enumerate(rows):
            lat = s["latency"]
            mark = " ◆" if (name, s["mode"], s["level"]) in knee_at else ""
            guess = bool(s.get("estimated_records"))
            table.add_row(
                s["label"] + mark, str(s["requests"]),
                _num(None if s["success_rate"] is None else s["success_rate"] * 100, 0),
                fmt_ms(lat["ttft"]["p50"]), fmt_ms(lat["ttft"]["p95"]),
                fmt_ms(lat["ttft"]["p99"]), fmt_ms(lat["time_to_first_answer"]["p50"]),
                estimated(fmt_ms(lat["tpot"]["p50"]), guess),
                estimated(fmt_ms(lat["tpot"]["p95"]), guess),
                estimated(_num(lat["tps"]["p50"]), guess),
                fmt_ms(lat["e2e"]["p50"]), fmt_ms(lat["e2e"]["p95"]),
                fmt_ms(lat["inter_chunk"]["p99"]), _num(s["request_throughput"], 2),
                estimated(_num(s["output_tokens_per_second"]), guess), _num(s["goodput"], 2),
                fmt_cost(s["cost_per_call"], None), end_section=i == len(rows) - 1)
    if len(names) == 1:
        table.title = f"{table.title} — {names[0]}"
    return table


def distribution_table(summaries: Sequence[Mapping[str, Any]]) -> Table:
    """p50/p90/p95/p99/mean/max of every latency, per level."""
    table = Table(title="latency distributions (successful requests)", title_justify="left")
    for column in ("series", "level", "metric", "n", "p50", "p90", "p95", "p99", "mean", "max"):
        table.add_column(column, justify="left" if column in ("series", "level", "metric")
                         else "right", no_wrap=True)
    names = {"ttft": "TTFT", "time_to_first_answer": "first answer", "tpot": "TPOT",
             "tps": "TPS (tok/s)", "e2e": "E2E", "inter_chunk": "inter-chunk gap"}
    for s in summaries:
        for i, (name, title) in enumerate(names.items()):
            st = s["latency"][name]
            fmt: Callable[[Any], str] = _num if name == "tps" else fmt_ms
            guess = name in ("tpot", "tps") and bool(s.get("estimated_records"))
            table.add_row(series_name(s) if i == 0 else "", s["label"] if i == 0 else "",
                          estimated(title, guess), str(st["count"]),
                          *(fmt(st[k]) for k in ("p50", "p90", "p95", "p99", "mean", "max")),
                          end_section=i == len(names) - 1)
    return table


def totals_table(summaries: Sequence[Mapping[str, Any]]) -> Table:
    """Results by class, token totals and cost per level."""
    table = Table(title="results, tokens and cost", title_justify="left")
    for column in ("series", "level", "results", "prompt tok", "completion tok", "reasoning tok",
                   "wall", "cost/call", "cost total"):
        table.add_column(column, no_wrap=column != "results",
                         justify="right" if "tok" in column or "cost" in column
                         or column == "wall" else "left")
    for s in summaries:
        currency = s["currency"] if isinstance(s["currency"], str) else None
        results = ", ".join(f"{k} {v}" for k, v in s["results"].items())
        guess = bool(s.get("estimated_records"))
        table.add_row(series_name(s), s["label"], results + ("" if s["complete"] else
                                                             " (interrupted)"),
                      str(s["tokens"]["prompt"]), estimated(str(s["tokens"]["completion"]), guess),
                      estimated(str(s["tokens"]["reasoning"]), guess), f"{s['wall_seconds']:.2f}s",
                      fmt_cost(s["cost_per_call"], currency), fmt_cost(s["cost_total"], currency))
    return table


def print_failures(console: Console, runs: Sequence[LevelRun]) -> None:
    """For each failure class per level: how many, the first reason and the likely fix."""
    for run in runs:
        seen: dict[str, list[dict[str, Any]]] = {}
        for r in run.records:
            if r["result"] != "success":
                seen.setdefault(r["result"], []).append(r)
        for result_value, failed in seen.items():
            first = failed[0]
            console.print(f"[red]✗[/red] {escape(REDACTOR(series_name(run.series)))} "
                          f"{run.level.label}: {len(failed)} × [bold]{result_value}[/bold] — "
                          f"{escape(REDACTOR(first['reason']))}", soft_wrap=True)
            hint = _hint_for_record(first, run.series)
            if hint:
                console.print(f"  [yellow]likely fix:[/yellow] {escape(hint)}", soft_wrap=True)


def _hint_for_record(record: Mapping[str, Any], series: Series) -> str:
    from exporter.errors import Result

    stub = ProbeResult(target=record["target"], model=record["model"], probe=record["probe"],
                       result=Result(record["result"]), reason=record["reason"],
                       status=record["status"])
    return REDACTOR(hint_for(stub, series))


def print_knees(console: Console, knees: Sequence[Mapping[str, Any]]) -> None:
    """One line per series: the knee and why."""
    for k in knees:
        if k["label"] is None:
            console.print(f"knee {k['series']}: none — {k['reason']}", soft_wrap=True)
        elif k["reached"]:
            console.print(f"[bold]knee {k['series']}: {k['label']}[/bold] ◆ — {k['reason']}",
                          soft_wrap=True)
        else:
            console.print(f"knee {k['series']}: not reached (highest tested {k['label']}) — "
                          f"{k['reason']}", soft_wrap=True)


# ---------------------------------------------------------------------------------------------
# The command


@dataclass(frozen=True)
class BenchOutputs:
    """Where to write results and what to compare with."""

    output: Path | None = None
    csv: Path | None = None
    report: Path | None = None
    baseline: Path | None = None
    fail_on: str | None = None


@contextlib.contextmanager
def _short_switch_interval() -> Iterator[None]:
    """The progress bar redraws from a thread: let the loop that stamps tokens take the GIL back
    within 0.5 ms (default 5 ms), as the daemon does for its render threads."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


async def run_bench(config: Config, series: Sequence[Series], options: BenchOptions, *,
                    console: Console | None = None,
                    progress_console: Console | None = None) -> dict[str, Any]:
    """Run the benchmark and return the run document (Ctrl-C ends it early, keeping results)."""
    console = console or make_console()
    progress_console = progress_console or Console(stderr=True)
    loop = asyncio.get_running_loop()
    started = time.time()
    with _Reporter(progress_console) as reporter:
        async with contextlib.AsyncExitStack() as stack:
            reuse = options.connections is Connections.REUSE
            rng = random.Random(options.seed)
            driver: LevelDriver
            if options.workers > 1:
                driver = await stack.enter_async_context(
                    WorkerPool(config, options.workers, reuse_connections=reuse, rng=rng))
            else:
                prober = await stack.enter_async_context(
                    probing(config, reuse_connections=reuse))
                driver = LocalDriver(prober, rng=rng)
            bench = Bench(driver, options, reporter)
            stack.enter_context(steady_gc())
            stack.enter_context(_short_switch_interval())
            handled = False
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                loop.add_signal_handler(signal.SIGINT, bench.interrupt)
                handled = True  # only possible in the main thread
            try:
                await bench.run(series)
            finally:
                if handled:
                    loop.remove_signal_handler(signal.SIGINT)
    document = build_document(config, options, bench.runs, started_at=started,
                              finished_at=time.time(), interrupted=bench.interrupted)
    summaries = document["summaries"]
    console.print(sweep_table(summaries, document["knees"], options.slo.describe() or None))
    console.print(distribution_table(summaries))
    console.print(totals_table(summaries))
    print_failures(console, bench.runs)
    print_knees(console, document["knees"])
    if bench.interrupted:
        console.print("[yellow]interrupted: results cover the requests that finished[/yellow]")
    return document


async def run_bench_command(config: Config, *, target: str | None, model: str | None,
                            probe: str | None, options: BenchOptions,
                            outputs: BenchOutputs) -> int:
    """The `bench` command; exit 0, 1 (regression, or nothing succeeded), 2 (usage), 130."""
    from exporter.compare import compare, parse_fail_on, print_comparison

    series = select_series(config, target, model, probe)
    if not series:
        print("error: no configured series matches the selection "
              f"(target={target or '*'}, model={model or '*'}, probe={probe or '*'})",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        rules = parse_fail_on(outputs.fail_on)
        baseline = (orjson.loads(outputs.baseline.read_bytes())
                    if outputs.baseline is not None else None)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if rules and baseline is None:
        print("error: --fail-on needs --baseline", file=sys.stderr)
        return EXIT_USAGE
    console = make_console()
    document = await run_bench(config, series, options, console=console)
    code = EXIT_OK
    if baseline is not None:
        deltas = compare(baseline, document, rules)
        document["comparison"] = {"baseline": str(outputs.baseline),
                                  "fail_on": outputs.fail_on,
                                  "deltas": [d.as_json() for d in deltas],
                                  "regressions": sum(d.regression for d in deltas)}
        print_comparison(console, deltas)
        if any(d.regression for d in deltas):
            code = EXIT_FAILED
    if outputs.output is not None:
        write_json(outputs.output, document)
        console.print(f"wrote {outputs.output}")
    if outputs.csv is not None:
        write_csv(outputs.csv, document["records"])
        console.print(f"wrote {outputs.csv} ({len(document['records'])} rows)")
    if outputs.report is not None:
        write_report(outputs.report, document)
        console.print(f"wrote {outputs.report}")
    if document["interrupted"]:
        return EXIT_INTERRUPTED
    if not any(s["succeeded"] for s in document["summaries"]):
        console.print("[red]no request succeeded[/red]")
        return EXIT_FAILED
    return code

"""A whole benchmark: every level of every series, one after another, with progress for humans;
Ctrl-C ends it early and keeps what finished. The result is the run document.

Each level runs `--requests N` requests (or for `--duration`), after `--warmup K` uncounted ones
run the same way (they open the connections the level will use); how levels run — the loops,
the ramp, the `--workers` processes — lives in `loadgen` and `workers`. Every number comes from
`Prober.probe` and `measure.percentile`: the definitions are the daemon's. Raw per-request
records are kept; summaries, the knee, CSV, the HTML report and baseline comparisons are all
computed from those records.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from exporter import __version__
from exporter.bench.loadgen import SWITCH_INTERVAL, LevelDriver, LevelPlan, LocalDriver, steady_gc
from exporter.bench.model import BenchOptions, Connections, RunDocument
from exporter.bench.summary import find_knees, summarize
from exporter.bench.workers import WorkerPool
from exporter.commands.selection import probing
from exporter.config import Config, Series, redacted
from exporter.judge.engine import Judge, without_long_answer
from exporter.judge.prompt import MAX_GRADED
from exporter.probe.assembly import ANSWER_LIMIT
from exporter.probe.prober import Prober
from exporter.record import CLOCK, BenchContext, Level, Record
from exporter.result import ProbeResult, Verdict

JUDGE_CONCURRENCY = 4  # judge calls in flight at once, after each level

@dataclass
class LevelRun:
    """One (series, level): its records, in start order, once it ended; when it ran."""

    series: Series
    level: Level
    records: list[Record] = field(default_factory=list)
    wall_seconds: float = 0.0
    started_at: float = 0.0
    warmup: int = 0
    complete: bool = False

    @property
    def name(self) -> str:
        """`target/model/probe`."""
        return "/".join(self.series.key)


class Reporter:
    """Progress for humans: a rich bar per level on a terminal, plain lines otherwise."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._live = console.is_terminal
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
            console=console, refresh_per_second=4, transient=False)
        self._task: Any = None

    def __enter__(self) -> Reporter:
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

    def judging(self, run: LevelRun, answers: int) -> None:
        """A level's answers go to its judge."""
        self._console.print(f"bench: {run.name} {run.level.label}: judging {answers} answers",
                            soft_wrap=True)

    def finish(self, run: LevelRun, interrupted: bool) -> None:
        """A level ended."""
        ok = sum(1 for r in run.records if r.result.success)
        if self._live and self._task is not None:
            self._progress.update(self._task, total=len(run.records),
                                  completed=len(run.records),
                                  status=f"ok {ok}" + (" · interrupted" if interrupted else ""))
        else:
            self._console.print(
                f"bench: {run.name} {run.level.label}: {len(run.records)} "
                f"done, {ok} ok in {run.wall_seconds:.1f}s"
                + (" (interrupted)" if interrupted else ""), soft_wrap=True)


class Bench:
    """Runs every (series × level) and keeps what finished, also when interrupted."""

    def __init__(self, driver: LevelDriver, options: BenchOptions, reporter: Reporter, *,
                 clock: Callable[[], float] = time.perf_counter,
                 wall_clock: Callable[[], float] = time.time,
                 judge: Judge | None = None) -> None:
        self._driver = driver
        self._judge = judge
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
        self._reporter.start(run.name, level, options.requests, options.warmup)
        done: list[tuple[float, int, ProbeResult, float]] = []
        ok = 0

        def on_done(index: int, result: ProbeResult, start: float, end: float) -> None:
            nonlocal ok
            done.append((start, index, result, end))
            ok += result.success
            self._reporter.advance(len(done), ok)

        origin = 0.0

        def measuring() -> None:
            nonlocal origin
            if options.warmup:
                self._reporter.measuring()
            run.started_at = self._wall()
            origin = self._clock()

        judged = self._judge is not None and self._judge.judge_of(series) is not None
        plan = _plan(options, MAX_GRADED if judged else ANSWER_LIMIT)

        async def body() -> None:
            try:
                await self._driver.run_level(series, level, plan, on_done, measuring)
            finally:
                run.wall_seconds = self._clock() - origin if origin else 0.0

        self._current = asyncio.create_task(body())
        await asyncio.wait([self._current])
        task, self._current = self._current, None
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error
        run.complete = not task.cancelled()
        # In start order (several workers report as they finish, each counting on its own).
        done.sort(key=lambda d: (d[0], d[1]))
        verdicts: list[tuple[Verdict | None, float | None]] = [(None, None)] * len(done)
        if judged and not task.cancelled() and done:
            verdicts = await self._graded(run, series, [result for _, _, result, _ in done])
        run.records = [
            Record(without_long_answer(result, ANSWER_LIMIT),
                   BenchContext(level, index, start, end,
                                options.slo.met(result) if options.slo else None,
                                *verdicts[index]))
            for index, (start, _, result, end) in enumerate(done)]
        self._reporter.finish(run, interrupted=task.cancelled() or self.interrupted)

    async def _graded(self, run: LevelRun, series: Series, results: Sequence[ProbeResult]
                      ) -> list[tuple[Verdict | None, float | None]]:
        """The judge's verdict and score on each answer, after the level (its calls never load
        the endpoint while it is measured); a few at a time. Ctrl-C keeps what was judged."""
        assert self._judge is not None
        judge = self._judge
        verdicts: list[tuple[Verdict | None, float | None]] = [(None, None)] * len(results)
        slots = asyncio.Semaphore(JUDGE_CONCURRENCY)
        self._reporter.judging(run, sum(r.success and r.case is not None for r in results))

        async def one(index: int, result: ProbeResult) -> None:
            async with slots:
                grading = await judge.grade(series, result)
            if grading is not None and grading.judgement is not None:
                verdicts[index] = (grading.judgement.verdict, grading.judgement.score)

        async def every() -> None:
            async with asyncio.TaskGroup() as group:
                for index, result in enumerate(results):
                    group.create_task(one(index, result))

        self._current = asyncio.create_task(every())
        await asyncio.wait([self._current])
        task, self._current = self._current, None
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error
        return verdicts


def _plan(options: BenchOptions, answer_limit: int = ANSWER_LIMIT) -> LevelPlan:
    """How much of each level to run."""
    return LevelPlan(options.requests, options.duration, options.warmup, options.ramp,
                     answer_limit=answer_limit)


def build_document(config: Config, options: BenchOptions, runs: Sequence[LevelRun], *,
                   started_at: float, finished_at: float, interrupted: bool) -> RunDocument:
    """The run document: config (secrets removed), version, timestamps, raw records, summaries,
    knees."""
    summaries = []
    records: list[Record] = []
    for run in runs:
        if not run.records and not run.complete:
            continue  # interrupted before anything finished
        records += run.records
        summaries.append(summarize(run.records, series=run.series.key, level=run.level,
                                   wall_seconds=run.wall_seconds, slo=options.slo,
                                   warmup=run.warmup, complete=run.complete))
    return RunDocument(
        version=__version__, started_at=started_at, finished_at=finished_at,
        started=_iso(started_at), finished=_iso(finished_at), interrupted=interrupted,
        options=options, clock=CLOCK, config=redacted(config), summaries=tuple(summaries),
        knees=tuple(find_knees(summaries, options.knee_threshold)), records=tuple(records))


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="seconds")


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
                    progress_console: Console | None = None) -> tuple[RunDocument, list[LevelRun]]:
    """Run the benchmark (Ctrl-C ends it early, keeping results): the document, and the runs
    with the series they ran (for the likely fixes of failures)."""
    progress_console = progress_console or Console(stderr=True)
    loop = asyncio.get_running_loop()
    started = time.time()
    with Reporter(progress_console) as reporter:
        async with contextlib.AsyncExitStack() as stack:
            reuse = options.connections is Connections.REUSE
            rng = random.Random(options.seed)
            driver: LevelDriver
            prober: Prober | None = None
            if options.workers > 1:
                driver = await stack.enter_async_context(
                    WorkerPool(config, options.workers, reuse_connections=reuse, rng=rng))
            else:
                prober = await stack.enter_async_context(
                    probing(config, reuse_connections=reuse))
                driver = LocalDriver(prober, rng=rng)
            judge = None
            if any(config.judge_of(s) is not None for s in series):
                if prober is None:  # with --workers the levels' probers are in the workers
                    prober = await stack.enter_async_context(
                        Prober(max_output_bytes=config.global_.max_output_bytes))
                judge = Judge(prober)
                judge.apply(config)
            bench = Bench(driver, options, reporter, judge=judge)
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
    return document, bench.runs

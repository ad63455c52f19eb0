"""Runs every series on its own interval: stable offset + jitter, global concurrency, no overlap.

Each series ticks on a fixed grid (so it never drifts) and starts its probe as a separate task
at each tick. The ticks of all series wait in one heap behind one timer: a sleeping series costs
a heap entry (~0.2 KiB), not a task with its frame, future and timer handle (~1.8 KiB), and a
tick costs a heap push and pop. The first probe of a series new to the schedule (every series
at start, the ones a reload adds) comes within min(interval, window) of being added, spread by
the same stable offset, then the series joins its grid; the window is 10 s, longer when more
than 250 first probes a second would start (`first_probe_window`). A series discovery adds
later (a model a gateway began to list) spreads its first probe over its whole interval: a
gateway that lists many new names at once cannot make the exporter probe them all at once.
A tick that finds the previous probe of the same series still running is skipped
(`reason="overlap"`). On-demand probes (`run_now`, the `/probe` endpoint) run outside the
scheduled concurrency limit, so they can never starve scheduled series.

Durations (grid, Retry-After pauses) are on the monotonic clock; the wall clock only dates
results and the budget's day.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.config import Config, Series, SeriesKey
from exporter.config.workload import CacheRole
from exporter.errors import Result
from exporter.exposition.families import SkipReason
from exporter.exposition.metrics import ExporterMetrics
from exporter.identity.monitor import IdentityMonitor
from exporter.judge.engine import Judge, record, without_long_answer
from exporter.judge.prompt import MAX_GRADED
from exporter.log import get_logger
from exporter.probe.assembly import ANSWER_LIMIT
from exporter.probe.prober import Prober
from exporter.result import ProbeResult
from exporter.serve.budget import Budget
from exporter.serve.results import ResultStore

FIRST_PROBE_WINDOW = 10.0  # seconds: every series probes this soon after start (or its interval)
# First probes per second at most: a large plan spreads its first probes over a longer window
# instead of starting at many times its steady rate (5,000 series would make 500 probes/s).
FIRST_PROBE_RATE = 250.0


def first_probe_window(series: int) -> float:
    """Seconds over which the first probes of `series` series are spread (before the interval
    caps it): 10 s, longer when that would exceed FIRST_PROBE_RATE."""
    return max(FIRST_PROBE_WINDOW, series / FIRST_PROBE_RATE)


def first_ticks(start: float, interval: float, fraction: float,
                window: float = FIRST_PROBE_WINDOW) -> tuple[float, float]:
    """(first probe, next grid tick) of a series started at `start` with its stable `fraction`.

    The first probe comes `fraction` of the way into min(interval, window); the grid is
    `start + fraction * interval + k * interval`, joined at its first tick that is at least that
    window after the first probe (so two probes are never squeezed together).
    """
    window = min(interval, window)
    first = start + fraction * window
    grid = start + fraction * interval
    while grid < first + window:
        grid += interval
    return first, grid


@dataclass(slots=True, eq=False)
class _Ticks:
    """A series on its grid: the next grid tick (a planned start is that plus jitter)."""

    series: Series
    next_tick: float
    active: bool = True  # False once a reload removed or replaced the series


class Scheduler:
    """Schedules probes, records their results, and applies reloads."""

    def __init__(self, prober: Prober, metrics: ExporterMetrics, store: ResultStore, *,
                 max_concurrency: int = 16, rng: random.Random | None = None,
                 wall_clock: Callable[[], float] = time.time,
                 clock: Callable[[], float] = time.monotonic, logger: Any = None) -> None:
        self._prober = prober
        self._metrics = metrics
        self._store = store
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._max_concurrency = max_concurrency
        self._rng = rng or random.Random()
        self._wall = wall_clock
        self._clock = clock
        self._log = logger or get_logger()
        self._ticks: dict[SeriesKey, _Ticks] = {}
        self._heap: list[tuple[float, int, _Ticks]] = []  # (planned start, order, series)
        self._order = itertools.count()  # ties in the heap go by insertion
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._running: dict[SeriesKey, asyncio.Task[ProbeResult]] = {}
        self._warm_after: dict[SeriesKey, Series] = {}  # cold series key → its warm series
        self._paused_until: dict[SeriesKey, float] = {}  # on `clock`
        # Last result of each failing series and how many failures in a row: logs follow
        # changes. A healthy series has no entry.
        self._health: dict[SeriesKey, tuple[Result, int]] = {}
        self._overclaimed: dict[SeriesKey, int] = {}  # charges capped so far (warned at the first)
        self._refused: set[tuple[str, str, str]] = set()  # (target, model, why) warned about
        self._stopping = False
        self._claims: set[SeriesKey] = set()  # series whose unsupported skip was logged
        self._started = False  # after the first apply: discovered series spread further
        self.budget: Budget | None = None
        self._budget_config: object = None
        self._save_lock = asyncio.Lock()
        # Identity series: their answers are samples, tested window by window.
        self.identity = IdentityMonitor(metrics, logger=self._log, wall_clock=wall_clock)
        # Judged series: each answer to a case with a reference is graded by its judge.
        self.judge = Judge(prober, logger=self._log, wall_clock=wall_clock)
        self._grading: set[asyncio.Task[ProbeResult]] = set()  # on-demand answers being judged

    @property
    def in_flight(self) -> int:
        """Probes running now."""
        return len(self._running)

    def apply(self, config: Config) -> None:
        """Start loops for new or changed series, stop loops of removed ones."""
        if config.global_.max_concurrency != self._max_concurrency:
            self._semaphore = asyncio.Semaphore(config.global_.max_concurrency)
            self._max_concurrency = config.global_.max_concurrency
        budget_config = (config.global_.budget, config.state_dir)
        if budget_config != self._budget_config:
            self._budget_config = budget_config
            self.budget = None
            if config.global_.budget is not None:
                self.budget = Budget(config.global_.budget, state_dir=config.state_dir,
                                     wall_clock=self._wall, logger=self._log,
                                     targets=(t.name for t in config.targets))
                self.budget.load()
        elif self.budget is not None and self.budget.problem:
            self.budget.load()  # a reload is how an operator says the record was fixed
        if self.budget is not None:
            self.budget.set_targets(t.name for t in config.targets)
        self._metrics.set_budget(self.budget)
        self._warn_prices(config)
        self.identity.apply(config)
        self.judge.apply(config)
        wanted = {s.key: s for s in config.series}
        # A cache pair's warm series is not scheduled: it runs right after its cold one.
        self._warm_after = {s.sibling(CacheRole.COLD).key: s for s in config.series
                            if s.workload.cache is CacheRole.WARM}
        scheduled = set(self._ticks)  # a series a reload changed is not new to the gateway
        for key, ticks in list(self._ticks.items()):
            if wanted.get(key) != ticks.series:
                ticks.active = False  # an in-flight probe of this series is left to finish
                del self._ticks[key]
        self._claims &= wanted.keys()
        for known in (self._paused_until, self._health, self._overclaimed):
            for key in [k for k in known if k not in wanted]:
                del known[key]
        loop = asyncio.get_running_loop()
        now = loop.time()
        # The series new to the schedule (all of them at start) spread their first probes.
        added = [series for key, series in wanted.items() if key not in self._ticks
                 and series.workload.cache is not CacheRole.WARM]
        window = first_probe_window(len(added))
        for series in added:
            interval = series.interval
            spread = (interval if self._started and series.discovered
                      and series.key not in scheduled else window)
            # A stable offset spreads series the same way after every restart.
            first, next_tick = first_ticks(now, interval, series.stable_fraction(), spread)
            ticks = self._ticks[series.key] = _Ticks(series, next_tick)
            self._push(first + self._rng.uniform(0.0, series.jitter * min(interval, spread)),
                       ticks)
        self._started = True
        self._arm(loop)

    def _push(self, planned: float, ticks: _Ticks) -> None:
        heapq.heappush(self._heap, (planned, next(self._order), ticks))

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Set the timer for the earliest planned start (dropping removed series on top)."""
        heap = self._heap
        while heap and not heap[0][2].active:
            heapq.heappop(heap)
        when = heap[0][0] if heap and not self._stopping else math.inf
        if when >= self._timer_at:
            return  # the timer fires first (or as planned); it re-arms then
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = loop.call_at(when, self._fire, loop), when

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start every probe that is due, plan each series' next start, re-arm the timer."""
        self._timer, self._timer_at = None, math.inf
        heap = self._heap
        while heap and heap[0][0] <= loop.time():
            planned, _, ticks = heapq.heappop(heap)
            if not ticks.active:
                continue
            series = ticks.series
            try:
                self._start(series, planned)
            except Exception as exc:  # a bug: this tick is lost, never the series' grid
                self._log.error("series tick failed", target=series.key[0],
                                model=series.key[1], probe=series.key[2],
                                error=type(exc).__name__, exc_info=exc)
            interval = series.interval
            now = loop.time()
            if now - ticks.next_tick > interval:  # the loop was blocked for long: skip ahead
                ticks.next_tick = now + interval
            self._push(ticks.next_tick + self._rng.uniform(0.0, series.jitter * interval), ticks)
            ticks.next_tick += interval
        self._arm(loop)

    def skip_reason(self, series: Series) -> SkipReason | None:
        """Why a probe of this series must not be sent now (rate-limited, budget), if so."""
        if series.claimed_unsupported:
            return SkipReason.UNSUPPORTED
        if self._paused_until.get(series.key, float("-inf")) > self._clock():
            return SkipReason.RATE_LIMITED
        if self.budget is not None and self.budget.exhausted(series.target.name):
            return SkipReason.BUDGET
        return None

    def _track(self, key: SeriesKey, task: asyncio.Task[ProbeResult]) -> None:
        self._running[key] = task
        task.add_done_callback(lambda _t: self._running.pop(key, None))

    def _start(self, series: Series, planned: float) -> None:
        key = series.key
        if key in self._running:
            self._metrics.record_skip(key, SkipReason.OVERLAP)
            self._log.debug("probe skipped", reason=SkipReason.OVERLAP.value, target=key[0],
                            model=key[1], probe=key[2])
            return
        reason = self.skip_reason(series)
        if reason is not None:
            self._metrics.record_skip(key, reason)
            if reason is SkipReason.UNSUPPORTED and key not in self._claims:
                self._claims.add(key)  # once per series while it is configured
                gateway = series.gateway
                self._log.warning(
                    "probe skipped: the gateway says the model cannot serve it",
                    target=key[0], model=key[1], probe=key[2],
                    mode=gateway.mode.value if gateway and gateway.mode else None,
                    lacks=sorted(f.value for f in gateway.lacks) if gateway else [])
            return
        self._track(key, asyncio.create_task(self._run(series, planned), name=f"probe {key}"))

    async def _run(self, series: Series, planned: float) -> ProbeResult:
        """Wait for a concurrency slot, probe, record; a cache pair's cold probe that
        succeeded is followed at once, in the same slot, by its warm probe (same prefix)."""
        async with self._semaphore:
            self._metrics.observe_lag(max(0.0, asyncio.get_running_loop().time() - planned))
            result = await self._probe(series)
            warm = self._warm_after.get(series.key)
            if warm is not None:  # a cache pair is never judged: it has no cases
                result = self._record(result)
                if (result.success and warm.key not in self._running
                        and self.skip_reason(warm) is None):
                    self._record(await self._probe(warm))
                return result
        return self._record(await self._graded(series, result))

    async def _run_unlimited(self, series: Series) -> ProbeResult:
        """Probe and record without a scheduled slot (on-demand probes). A judged answer is
        graded after the answer is returned: the scrape waits for the probe, not the judge."""
        result = await self._probe(series)
        if self.judge.judge_of(series) is not None:
            grading = asyncio.create_task(self._graded(series, result),
                                          name=f"judge {series.key}")
            self._grading.add(grading)
            grading.add_done_callback(self._grading.discard)
            result = without_long_answer(result, ANSWER_LIMIT)
        return self._record(result)

    async def _probe(self, series: Series) -> ProbeResult:
        self._metrics.in_flight.inc()
        judged = self.judge.judge_of(series) is not None  # the judge reads a longer answer
        try:
            return await self._prober.probe(
                series, answer_limit=MAX_GRADED if judged else ANSWER_LIMIT)
        finally:
            self._metrics.in_flight.dec()

    async def _graded(self, series: Series, result: ProbeResult) -> ProbeResult:
        """Grade a judged series' answer (outside the probe's concurrency slot: the judge is
        another endpoint); the judge's calls count in the budget and in the judge target's
        share of it. The result stays the model's, with its answer cut as every result's is."""
        judge = self.judge.judge_of(series)
        payer = judge.target if judge is not None else None
        grading = await self.judge.grade(
            series, result,
            may_spend=lambda: self.budget is None or not self.budget.exhausted(payer))
        if grading is None:
            return result
        record(self._metrics.judged, result, grading)
        self.judge.publish(series, result, grading)
        for call in grading.calls:
            self._store.record(call)  # a failing judge call is among the recent failures
            if self.budget is not None and call.cost and self.budget.add(
                    call.cost, call.currency, call.target):
                self._metrics.set_budget(self.budget)
                asyncio.get_running_loop().create_task(self._save_budget(self.budget))
        if grading.judgement is not None:
            self._log.debug("answer judged", target=result.target, model=result.model,
                            probe=result.probe, case=result.case,
                            verdict=grading.judgement.verdict.value,
                            reason=grading.judgement.reason)
        return without_long_answer(result, ANSWER_LIMIT)

    def _record(self, result: ProbeResult) -> ProbeResult:
        """Record a finished probe everywhere; the result as recorded."""
        result = self.identity.observe(result)  # an identity answer stays with the monitor
        self._metrics.record(result)
        self._store.record(result)
        if result.claimed_cost is not None:
            self._warn_overclaim(result)
        if self.budget is not None and result.cost and self.budget.add(
                result.cost, result.currency, result.target):
            self._metrics.set_budget(self.budget)
            asyncio.get_running_loop().create_task(self._save_budget(self.budget))
        if result.retry_after:
            self._paused_until[result.key] = self._clock() + result.retry_after
        self._log_change(result)
        return result

    def _warn_prices(self, config: Config) -> None:
        """One warning per (target, model) whose gateway or library price a bound refused,
        when it first is (again after it was accepted)."""
        refused = {(s.target.name, s.model): s for s in config.series
                   if s.refused_price is not None}
        now = set()
        for (target, model), series in refused.items():
            why = series.refused_price
            assert why is not None
            key = (target, model, why.describe())
            now.add(key)
            if key not in self._refused:
                self._log.warning("price refused by a sanity bound", target=target, model=model,
                                  source=why.source.value, reason=why.reason.value,
                                  rate=why.rate, value=why.value, bound=why.bound,
                                  using=series.price.source.value if series.price
                                  else "unknown")
        self._refused = now

    def _warn_overclaim(self, result: ProbeResult) -> None:
        """One warning per series when the server's usage first claims more than the probe's
        charge ceiling (later ones at debug; `llm_probe_cost_capped_total` counts them all)."""
        count = self._overclaimed.get(result.key, 0) + 1
        self._overclaimed[result.key] = count
        log = self._log.warning if count == 1 else self._log.debug
        log("usage claimed above the probe's cost ceiling; charged the ceiling",
            target=result.target, model=result.model, probe=result.probe,
            claimed=result.claimed_cost, charged=result.cost, currency=result.currency,
            times=count)

    def _log_change(self, result: ProbeResult) -> None:
        """One warning when a series starts failing (or fails differently), one info when it
        recovers; repeats at debug."""
        labels = {"target": result.target, "model": result.model, "probe": result.probe}
        previous, streak = self._health.get(result.key, (Result.SUCCESS, 0))
        if result.success:
            self._health.pop(result.key, None)
            if previous is Result.SUCCESS:
                self._log.debug("probe finished", **labels, ttft=result.timings.ttft)
            else:
                self._log.info("probe recovered", **labels, previous=previous.value,
                               failures=streak)
            return
        self._health[result.key] = (result.result, streak + 1)
        if result.result is previous:
            self._log.debug("probe failed again", **labels, result=result.result.value,
                            reason=result.reason, failures=streak + 1)
        else:
            self._log.warning("probe failing", **labels, result=result.result.value,
                              reason=result.reason, previous=previous.value)

    async def _save_budget(self, budget: Budget) -> None:
        async with self._save_lock:  # one writer at a time; the last write has the latest sum
            await asyncio.to_thread(budget.save)
        if budget is self.budget and budget.problem:
            self._metrics.set_budget(budget)  # the record turned out not to be ours

    async def run_now(self, series: Series, *, deadline: float | None = None) -> ProbeResult:
        """Probe a configured series at once, outside the scheduled concurrency (`/probe`).

        `deadline` (seconds) shortens the probe's timeout. A probe of the series already in
        flight is awaited instead of sending another; if it outlasts `deadline`, the answer is
        a timeout result of its own (not recorded: the running probe will be).
        """
        running = self._running.get(series.key)
        if running is None:
            if deadline is not None and deadline < series.timeout:
                series = dataclasses.replace(series, timeout=deadline)
            task = asyncio.create_task(self._run_unlimited(series),
                                       name=f"on-demand probe {series.key}")
            self._track(series.key, task)
            return await asyncio.shield(task)  # the prober keeps the deadline
        try:
            async with asyncio.timeout(deadline):
                return await asyncio.shield(running)
        except TimeoutError:
            target, model, probe = series.key
            return ProbeResult(target, model, probe, Result.TIMEOUT,
                               reason="a scheduled probe of this series was still running "
                                      f"after {deadline:g}s (the scrape's deadline)",
                               finished_at=self._wall())

    async def stop(self, grace: float = 10.0) -> None:
        """Stop scheduling; let in-flight probes finish within `grace` seconds."""
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf
        for ticks in self._ticks.values():
            ticks.active = False
        self._ticks.clear()
        self._heap.clear()
        running = list(self._running.values())
        if running:
            _done, pending = await asyncio.wait(running, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for grading in list(self._grading):
            grading.cancel()
        await asyncio.gather(*self._grading, return_exceptions=True)
        await self.identity.stop()

"""Runs every series on its own interval: stable offset + jitter, global concurrency, no overlap.

Each series has one loop task that sleeps until its next tick on a fixed grid (so it never
drifts), then starts its probe as a separate task. A tick that finds the previous probe of the
same series still running is skipped (`reason="overlap"`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

from exporter.budget import Budget
from exporter.config import Config, Series
from exporter.log import get_logger
from exporter.metrics import ExporterMetrics
from exporter.prober import Prober
from exporter.result import ProbeResult
from exporter.store import ResultStore

SeriesKey = tuple[str, str, str]


class Scheduler:
    """Schedules probes, records their results, and applies reloads."""

    def __init__(self, prober: Prober, metrics: ExporterMetrics, store: ResultStore, *,
                 max_concurrency: int = 16, rng: random.Random | None = None,
                 wall_clock: Callable[[], float] = time.time, logger: Any = None) -> None:
        self._prober = prober
        self._metrics = metrics
        self._store = store
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._max_concurrency = max_concurrency
        self._rng = rng or random.Random()
        self._wall = wall_clock
        self._log = logger or get_logger()
        self._loops: dict[SeriesKey, tuple[Series, asyncio.Task[None]]] = {}
        self._running: dict[SeriesKey, asyncio.Task[ProbeResult]] = {}
        self._paused_until: dict[SeriesKey, float] = {}
        self._stopping = False
        self.budget: Budget | None = None
        self._budget_config: object = None
        self._save_lock = asyncio.Lock()

    @property
    def in_flight(self) -> int:
        """Probes running now."""
        return len(self._running)

    def apply(self, config: Config) -> None:
        """Start loops for new or changed series, stop loops of removed ones."""
        if config.global_.max_concurrency != self._max_concurrency:
            self._semaphore = asyncio.Semaphore(config.global_.max_concurrency)
            self._max_concurrency = config.global_.max_concurrency
        if config.global_.budget != self._budget_config:
            self._budget_config = config.global_.budget
            self.budget = None
            if config.global_.budget is not None:
                self.budget = Budget(config.global_.budget, wall_clock=self._wall,
                                     logger=self._log)
                self.budget.load()
            self._metrics.set_budget(self.budget)
        wanted = {s.key: s for s in config.series}
        for key, (series, task) in list(self._loops.items()):
            if wanted.get(key) != series:
                task.cancel()  # an in-flight probe of this series is left to finish
                del self._loops[key]
        for key, series in wanted.items():
            if key not in self._loops:
                task = asyncio.create_task(self._series_loop(series), name=f"series {key}")
                self._loops[key] = (series, task)

    async def _series_loop(self, series: Series) -> None:
        """Tick on this series' grid forever."""
        loop = asyncio.get_running_loop()
        interval = series.interval
        # A stable offset spreads series over the interval the same way after every restart.
        next_tick = loop.time() + series.stable_fraction() * interval
        while True:
            planned = next_tick + self._rng.uniform(0.0, series.jitter * interval)
            delay = planned - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            next_tick += interval
            now = loop.time()
            if now - next_tick > interval:  # the loop was blocked for long: skip ahead
                next_tick = now + interval
            self._start(series, planned)

    def _start(self, series: Series, planned: float) -> None:
        key = series.key
        if key in self._running:
            self._metrics.record_skip(key, "overlap")
            self._log.debug("probe skipped", reason="overlap", target=key[0], model=key[1],
                            probe=key[2])
            return
        if self._paused_until.get(key, 0.0) > self._wall():
            self._metrics.record_skip(key, "rate_limited")
            return
        if self.budget is not None and self.budget.exhausted():
            self._metrics.record_skip(key, "budget")
            return
        task = asyncio.create_task(self._run(series, planned), name=f"probe {key}")
        self._running[key] = task
        task.add_done_callback(lambda _t, key=key: self._running.pop(key, None))

    async def _run(self, series: Series, planned: float | None) -> ProbeResult:
        """Wait for a concurrency slot, probe, record."""
        async with self._semaphore:
            if planned is not None:
                self._metrics.observe_lag(max(0.0, asyncio.get_running_loop().time() - planned))
            self._metrics.in_flight.inc()
            try:
                result = await self._prober.probe(series)
            finally:
                self._metrics.in_flight.dec()
        self._record(result)
        return result

    def _record(self, result: ProbeResult) -> None:
        self._metrics.record(result)
        self._store.record(result)
        if self.budget is not None and result.cost and self.budget.add(result.cost,
                                                                        result.currency):
            self._metrics.set_budget(self.budget)
            asyncio.get_running_loop().create_task(self._save_budget(self.budget))
        if result.retry_after:
            self._paused_until[result.key] = self._wall() + result.retry_after
        if result.success:
            self._log.debug("probe finished", target=result.target, model=result.model,
                            probe=result.probe, ttft=result.timings.ttft)
        else:
            self._log.warning("probe failed", target=result.target, model=result.model,
                              probe=result.probe, result=result.result.value,
                              reason=result.reason)

    async def _save_budget(self, budget: Budget) -> None:
        async with self._save_lock:  # one writer at a time; the last write has the latest sum
            await asyncio.to_thread(budget.save)

    async def run_now(self, series: Series) -> ProbeResult:
        """Run one probe of a configured series at once (the `/probe` endpoint)."""
        running = self._running.get(series.key)
        if running is not None:
            return await asyncio.shield(running)
        task = asyncio.create_task(self._run(series, None))
        self._running[series.key] = task
        task.add_done_callback(lambda _t, key=series.key: self._running.pop(key, None))
        return await asyncio.shield(task)

    async def stop(self, grace: float = 10.0) -> None:
        """Stop scheduling; let in-flight probes finish within `grace` seconds."""
        self._stopping = True
        for _series, task in self._loops.values():
            task.cancel()
        loops = [task for _s, task in self._loops.values()]
        self._loops.clear()
        await asyncio.gather(*loops, return_exceptions=True)
        running = list(self._running.values())
        if running:
            _done, pending = await asyncio.wait(running, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

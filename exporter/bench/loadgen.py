"""Load generation for `bench`: the closed and open loops of a level, warm-up, and a level run in
this process (`LocalDriver`; `exporter.bench.workers` runs one over several processes).

Closed loop: K requests stay in flight; a new one starts the moment one ends (never lock-step
rounds, which would measure a K-wide burst each time). Open loop: requests start at Poisson
arrival times whatever is still in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from exporter.config import Series
from exporter.probe.assembly import ANSWER_LIMIT
from exporter.probe.prober import Prober
from exporter.record import Level, LoadMode
from exporter.result import ProbeResult

Clock = Callable[[], float]
# The GIL switch interval while load runs (default 5 ms): threads that draw the progress bar or
# send results hand the GIL back to the loop that stamps tokens within 0.5 ms.
SWITCH_INTERVAL = 0.0005
# Full collections only when asked (between warm-up and measurement), never on their own.
NO_AUTOMATIC_FULL_GC = 1 << 30


@contextlib.contextmanager
def steady_gc() -> Iterator[None]:
    """While load runs: everything loaded so far frozen out of collections, and no automatic
    full collection. A full collection scans the whole heap and holds the loop that stamps
    tokens for tens of milliseconds (measured at K = 200); young ones stay short and still run.
    Each level takes its full collection after warm-up, before timing starts."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(thresholds[0], thresholds[1], NO_AUTOMATIC_FULL_GC)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


Done = Callable[[int, ProbeResult, float, float], None]


class LevelRunner:
    """Drives one level against one series; results reach `on_done` as they finish."""

    def __init__(self, prober: Prober, series: Series, *,
                 clock: Callable[[], float] = time.perf_counter,
                 rng: random.Random | None = None, answer_limit: int = ANSWER_LIMIT) -> None:
        self._prober = prober
        self._series = series
        self._answer_limit = answer_limit
        self._clock = clock
        self._rng = rng or random.Random()

    async def closed_loop(self, concurrency: int, count: int | None, duration: float | None,
                          on_done: Done, ramp: float = 0.0, phase: float = 0.0) -> None:
        """Keep `concurrency` requests in flight until `count` started or `duration` passed.

        Stream k starts `(k + phase) · ramp / concurrency` late: equal-length streams started
        together stay in lock-step and hit the server with K-wide bursts for good.
        """
        origin = self._clock()
        deadline = None if duration is None else origin + duration
        issued = itertools.count()
        started = 0

        async def worker(k: int) -> None:
            nonlocal started
            delay = origin + (k + phase) * ramp / concurrency - self._clock()
            if delay > 0:
                await asyncio.sleep(delay)
            while True:
                if count is not None and started >= count:
                    return
                if deadline is not None and self._clock() >= deadline:
                    return
                index = next(issued)
                started += 1
                t_start = self._clock() - origin
                result = await self._prober.probe(self._series, answer_limit=self._answer_limit)
                on_done(index, result, t_start, self._clock() - origin)

        async with asyncio.TaskGroup() as group:
            for k in range(concurrency):
                group.create_task(worker(k))

    async def open_loop(self, rate: float, count: int | None, duration: float | None,
                        on_done: Done) -> None:
        """Start requests at Poisson arrivals of `rate`/s until `count` or `duration`."""
        origin = self._clock()
        loop_sleep = asyncio.sleep
        next_at = 0.0
        async with asyncio.TaskGroup() as group:
            for index in itertools.count():
                if count is not None and index >= count:
                    break
                if duration is not None and next_at >= duration:
                    break
                delay = next_at - (self._clock() - origin)
                if delay > 0:
                    await loop_sleep(delay)
                group.create_task(self._one(index, origin, on_done))
                next_at += self._rng.expovariate(rate)

    async def _one(self, index: int, origin: float, on_done: Done) -> None:
        t_start = self._clock() - origin
        result = await self._prober.probe(self._series, answer_limit=self._answer_limit)
        on_done(index, result, t_start, self._clock() - origin)

    async def run(self, level: Level, count: int | None, duration: float | None,
                  on_done: Done, ramp: float = 0.0, phase: float = 0.0) -> None:
        """Run `level` for `count` requests or `duration` seconds (a closed loop ramps up)."""
        if level.mode is LoadMode.CONCURRENCY:
            await self.closed_loop(int(level.value), count, duration, on_done, ramp, phase)
        else:
            await self.open_loop(level.value, count, duration, on_done)


@dataclass(frozen=True)
class LevelPlan:
    """How much of a level to run: `requests` (or for `duration`), after `warmup` uncounted;
    a closed loop's streams start spread over `ramp` seconds (None: the warm-up's mean request
    duration), this worker's shifted by `phase` of a slot. `answer_limit`: answer characters
    kept (more for a judged series: its judge reads the answer)."""

    requests: int | None
    duration: float | None
    warmup: int
    ramp: float | None = None
    phase: float = 0.0
    answer_limit: int = ANSWER_LIMIT


async def warm_up(runner: LevelRunner, level: Level, plan: LevelPlan) -> float:
    """Run the plan's warm-up requests; the ramp to use (see LevelPlan)."""
    durations: list[float] = []
    if plan.warmup:
        await runner.run(warmup_level(level, plan.warmup), plan.warmup, None,
                         lambda _i, _r, start, end: durations.append(end - start))
    if plan.ramp is not None:
        return plan.ramp
    return sum(durations) / len(durations) if durations else 0.0


def warmup_level(level: Level, warmup: int) -> Level:
    """How warm-up requests run: like the level (open loop: one at a time), at most `warmup`."""
    warm = level if level.mode is LoadMode.CONCURRENCY else Level(LoadMode.CONCURRENCY, 1)
    return Level(LoadMode.CONCURRENCY, warmup) if warm.value > warmup else warm


class LevelDriver(Protocol):
    """Runs one level's warm-up, then its measured requests."""

    async def run_level(self, series: Series, level: Level, plan: LevelPlan, on_done: Done,
                        measuring: Callable[[], None]) -> None:
        """Warm up, call `measuring()`, then run the level; results reach `on_done`."""
        ...


class LocalDriver:
    """Runs levels in this process, on one prober."""

    def __init__(self, prober: Prober, *, clock: Clock = time.perf_counter,
                 rng: random.Random | None = None) -> None:
        self._prober = prober
        self._clock = clock
        self._rng = rng or random.Random()

    async def run_level(self, series: Series, level: Level, plan: LevelPlan, on_done: Done,
                        measuring: Callable[[], None]) -> None:
        """Warm up, call `measuring()`, then run the level; results reach `on_done`."""
        runner = LevelRunner(self._prober, series, clock=self._clock, rng=self._rng,
                             answer_limit=plan.answer_limit)
        ramp = await warm_up(runner, level, plan)
        gc.collect()  # see steady_gc
        measuring()
        await runner.run(level, plan.requests, plan.duration, on_done, ramp, plan.phase)

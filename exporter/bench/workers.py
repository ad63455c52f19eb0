"""`bench --workers N`: a level split over N worker processes, merged into one stream of results.

K in flight becomes K/N per process, a rate R becomes R/N per process (independent Poisson streams
add up to one of rate R), the request count is split the same way. Every process warms up first;
then all start together, and their results come back to the parent as one stream, with offsets
from one origin: CLOCK_MONOTONIC is system-wide on Linux, so stamps taken in different processes
line up. The parent merges them into one run, so summaries and percentiles are the same as if one
process had made every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import multiprocessing
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from exporter.bench.loadgen import (
    SWITCH_INTERVAL,
    Clock,
    Done,
    LevelPlan,
    LevelRunner,
    steady_gc,
    warm_up,
)
from exporter.config import Config, Series
from exporter.log import REDACTOR
from exporter.probe import tokens
from exporter.probe.prober import Prober
from exporter.record import Level, LoadMode
from exporter.result import ProbeResult
from exporter.simulator import start_simulator

# How long the parent waits for workers to hand over what finished after a stop or at exit.
STOP_GRACE = 10.0
# How often a worker sends the results that finished meanwhile.
FLUSH_INTERVAL = 0.2


def shares(total: int, weights: Sequence[int]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders); the shares sum to it."""
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    out = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: exact[i] - out[i], reverse=True)
    for i in by_remainder[:total - sum(out)]:
        out[i] += 1
    return out


def split_level(level: Level, plan: LevelPlan, workers: int) -> list[tuple[Level, LevelPlan]]:
    """Each worker's part of a level (workers with nothing to do get none)."""
    if level.mode is LoadMode.CONCURRENCY:
        weights = [k for k in shares(int(level.value), [1] * workers) if k]
        parts = [Level(LoadMode.CONCURRENCY, k) for k in weights]
    else:
        weights = [1] * workers
        parts = [Level(LoadMode.RATE, level.value / workers)] * workers
    requests = shares(plan.requests, weights) if plan.requests is not None else None
    warmup = shares(plan.warmup, weights)
    # Worker i's streams take every len(parts)-th start slot of the ramp, shifted by i.
    return [(part, LevelPlan(None if requests is None else requests[i], plan.duration,
                             max(1, warmup[i]) if plan.warmup else 0, plan.ramp,
                             i / len(parts), plan.answer_limit))
            for i, part in enumerate(parts)]


def _pump(conn: Connection, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[Any],
          tag: Any = None) -> None:
    """Thread: every message on `conn` into the loop's `inbox` (None once the other end left)."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            message = None
        with contextlib.suppress(RuntimeError):  # the loop closed first
            loop.call_soon_threadsafe(inbox.put_nowait,
                                      message if tag is None else (tag, message))
        if message is None or message == ("exit",):
            return


class _Worker:
    """One worker process: runs the level parts it is sent, streams results back."""

    def __init__(self, conn: Connection, config: Config, reuse_connections: bool) -> None:
        self._conn = conn
        self._config = config
        self._reuse = reuse_connections
        self._series = {s.key: s for s in config.series}
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._lock = asyncio.Lock()

    async def _send(self, message: Any) -> None:
        # Pickling and writing happen off the loop that stamps the probes' bytes.
        async with self._lock:
            await asyncio.to_thread(self._conn.send, message)

    async def serve(self) -> None:
        """Answer `level` messages until `exit` (or the parent went away)."""
        loop = asyncio.get_running_loop()
        threading.Thread(target=_pump, args=(self._conn, loop, self._inbox),
                         daemon=True).start()
        REDACTOR.update(self._config.secrets())
        await asyncio.to_thread(tokens.warm_up)
        async with Prober(max_output_bytes=self._config.global_.max_output_bytes,
                          reuse_connections=self._reuse) as prober:
            await self._send(("ready",))
            with steady_gc():
                await self._serve_levels(prober)

    async def _serve_levels(self, prober: Prober) -> None:
        """Run each `level` message until `exit`."""
        while True:
            message = await self._inbox.get()
            if message is None or message[0] == "exit":
                return
            if message[0] == "level":
                try:
                    await self._level(prober, *message[1:])
                except Exception as exc:  # reported, never a silent hang of the parent
                    await self._send(("error", f"{type(exc).__name__}: {exc}"))
                await self._send(("end",))

    async def _level(self, prober: Prober, key: tuple[str, str, str], level: Level,
                     plan: LevelPlan, seed: int) -> None:
        runner = LevelRunner(prober, self._series[key], rng=random.Random(seed),
                             answer_limit=plan.answer_limit)
        ramp = await warm_up(runner, level, plan)
        gc.collect()  # see steady_gc
        await self._send(("warm",))
        if (await self._inbox.get()) != ("go",):
            return
        batch: list[tuple[ProbeResult, float, float]] = []
        origin = time.perf_counter()

        def on_done(_index: int, result: ProbeResult, start: float, end: float) -> None:
            batch.append((result, origin + start, origin + end))

        async def flush() -> None:
            if batch:
                done = batch[:]
                batch.clear()
                await self._send(("done", done))

        async def flusher() -> None:
            while True:
                await asyncio.sleep(FLUSH_INTERVAL)
                await flush()

        running = asyncio.create_task(runner.run(level, plan.requests, plan.duration, on_done,
                                                 ramp, plan.phase))
        stop = asyncio.create_task(self._inbox.get())
        flushing = asyncio.create_task(flusher())
        try:
            await asyncio.wait({running, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (running, stop, flushing):
                task.cancel()
            await asyncio.gather(running, stop, flushing, return_exceptions=True)
        await flush()
        if not running.cancelled() and (error := running.exception()) is not None:
            raise error


def _worker_main(conn: Connection, config: Config, reuse_connections: bool) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    # Results are pickled and sent from threads: let the loop that stamps take the GIL back
    # within 0.5 ms (default 5 ms), as the daemon does for its render threads.
    sys.setswitchinterval(SWITCH_INTERVAL)
    asyncio.run(_Worker(conn, config, reuse_connections).serve())


class WorkerPool:
    """`bench --workers N`: levels split over N processes, merged into one stream of results."""

    def __init__(self, config: Config, workers: int, *, reuse_connections: bool,
                 rng: random.Random | None = None, clock: Clock = time.perf_counter) -> None:
        self._config = config
        self._workers = workers
        self._reuse = reuse_connections
        self._rng = rng or random.Random()
        self._clock = clock
        self._processes: list[Any] = []
        self._conns: list[Connection] = []
        self._inbox: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self._simulator: Any = None

    async def __aenter__(self) -> WorkerPool:
        REDACTOR.update(self._config.secrets())
        if self._config.simulator:  # served from here, for every worker
            self._simulator = await start_simulator(self._config.simulator,
                                                    api_key=self._config.simulator.api_key)
        context = multiprocessing.get_context("spawn")  # no copy of this loop's state
        loop = asyncio.get_running_loop()
        try:
            for i in range(self._workers):
                ours, theirs = context.Pipe()
                process = context.Process(target=_worker_main, daemon=True,
                                          args=(theirs, self._config, self._reuse),
                                          name=f"bench-worker-{i}")
                await asyncio.to_thread(process.start)
                theirs.close()
                self._processes.append(process)
                self._conns.append(ours)
                threading.Thread(target=_pump, args=(ours, loop, self._inbox, i),
                                 daemon=True).start()
            await self._expect(range(self._workers), "ready")
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(("exit",))
        for process in self._processes:
            await asyncio.to_thread(process.join, STOP_GRACE)
            if process.is_alive():
                process.terminate()
                await asyncio.to_thread(process.join, STOP_GRACE)
        for conn in self._conns:
            conn.close()
        self._processes, self._conns = [], []
        if self._simulator is not None:
            await self._simulator.close()
            self._simulator = None

    async def _expect(self, workers: Sequence[int] | range, what: str) -> None:
        """Wait until each of `workers` said `what`."""
        waiting = set(workers)
        while waiting:
            worker, message = await self._inbox.get()
            if message is None:
                raise RuntimeError(f"bench worker {worker} exited")
            if message[0] == "error":
                raise RuntimeError(f"bench worker {worker}: {message[1]}")
            if message[0] == what:
                waiting.discard(worker)

    async def run_level(self, series: Series, level: Level, plan: LevelPlan, on_done: Done,
                        measuring: Callable[[], None]) -> None:
        """Warm every worker up, start them together, merge their results as they come."""
        parts = split_level(level, plan, self._workers)
        active = range(len(parts))
        for worker, (part, part_plan) in zip(active, parts, strict=True):
            self._conns[worker].send(("level", series.key, part, part_plan,
                                      self._rng.getrandbits(64)))
        ended: set[int] = set()
        indices = itertools.count()
        origin = self._clock()
        try:
            await self._expect(active, "warm")
            measuring()
            origin = self._clock()
            for worker in active:
                self._conns[worker].send(("go",))
            await self._collect(active, ended, origin, indices, on_done)
        except asyncio.CancelledError:
            # Stopped (Ctrl-C): the workers cancel their requests and hand over what finished.
            for worker in set(active) - ended:
                with contextlib.suppress(OSError):
                    self._conns[worker].send(("stop",))
            with contextlib.suppress(TimeoutError, RuntimeError):
                await asyncio.wait_for(self._collect(active, ended, origin, indices, on_done),
                                       STOP_GRACE)
            raise

    async def _collect(self, active: range, ended: set[int], origin: float,
                       indices: itertools.count[int], on_done: Done) -> None:
        error = None
        while len(ended) < len(active):
            worker, message = await self._inbox.get()
            if message is None:
                ended.add(worker)
                error = error or f"bench worker {worker} exited"
            elif message[0] == "done":
                for result, start, end in message[1]:
                    on_done(next(indices), result, start - origin, end - origin)
            elif message[0] == "error":
                error = error or f"bench worker {worker}: {message[1]}"
            elif message[0] == "end":
                ended.add(worker)
        if error:
            raise RuntimeError(error)

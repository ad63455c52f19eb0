"""The daemon process of benchmarks/scale.py: the real `Daemon`, observed from inside.

Run as a script by scale.py (never imported): it imports only the standard library and the
exporter (from the source tree first on PYTHONPATH), so the RSS the benchmark measures is the
daemon's. It keeps every scheduler-lag observation (with when it happened), watches the event
loop with a 50 ms timer, times garbage collections, prints READY once started, and after
`duration` seconds writes what it saw as JSON to `out`.

    scale_daemon.py CONFIG LISTEN DURATION OUT GC_THRESHOLDS
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from exporter.config import load_config
from exporter.log import configure_logging
from exporter.result import ProbeResult
from exporter.serve.daemon import Daemon
from exporter.serve.scheduler import first_probe_window

LOOP_LAG_PERIOD = 0.05
STEADY_MARGIN = 2.0  # seconds after the first-probe window that still count as start-up
SLOW_YOUNG_GC = 0.005  # seconds: young collections longer than this are kept


async def run(config_path: str, listen: str, duration: float, out: str,
              gc_thresholds: tuple[int, ...] = ()) -> None:
    """Run the real Daemon for `duration` seconds after start, keeping raw observations."""
    configure_logging("error", "json")
    config = load_config(config_path)
    daemon = Daemon(Path(config_path), listen)
    daemon.owns_process = True  # GIL switch interval and GC settings, as `serve` makes them
    lags: list[float] = []
    steady: list[float] = []  # lags of probes after the first-probe window
    late: list[tuple[float, float]] = []  # (when, lag) of probes that started > 10 ms late
    loop_lags: list[float] = []
    results: Counter[str] = Counter()
    full_gcs: list[tuple[float, float]] = []  # (when, seconds)
    young_gcs: list[tuple[float, float, int]] = []  # (when, seconds, generation), slow ones
    observe_lag, record = daemon.metrics.observe_lag, daemon.metrics.record
    # Every series probes once within min(interval, 10 s) of start: 5,000 series make a burst
    # of 500 probes/s. Lags after that window (and a margin) are the steady state.
    steady_from = time.perf_counter() + min(config.global_.interval,
                                                  first_probe_window(len(config.series))) + \
        STEADY_MARGIN

    def keep_lag(seconds: float) -> None:
        lags.append(seconds)
        now = time.perf_counter()
        if now > steady_from:
            steady.append(seconds)
        if seconds > 0.01:
            late.append((now, seconds))
        observe_lag(seconds)

    def keep_result(result: ProbeResult) -> None:
        results[result.result.value] += 1
        record(result)

    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:  # how long collections stop us
        if phase == "start":
            gc_started[0] = time.perf_counter()
            return
        spent = time.perf_counter() - gc_started[0]
        if info["generation"] == 2:
            full_gcs.append((gc_started[0], spent))
        elif spent > SLOW_YOUNG_GC:
            young_gcs.append((gc_started[0], spent, info["generation"]))

    gc.callbacks.append(on_gc)
    daemon.metrics.observe_lag = keep_lag  # type: ignore[method-assign]
    daemon.metrics.record = keep_result  # type: ignore[method-assign]

    async def watch_loop() -> None:
        loop = asyncio.get_running_loop()
        while True:
            planned = loop.time() + LOOP_LAG_PERIOD
            await asyncio.sleep(LOOP_LAG_PERIOD)
            loop_lags.append(max(0.0, loop.time() - planned))

    started = time.perf_counter()
    await daemon.start(config)
    if gc_thresholds:
        gc.set_threshold(*gc_thresholds)
    start_seconds = time.perf_counter() - started
    print("READY", flush=True)
    watcher = asyncio.create_task(watch_loop())
    t0 = time.perf_counter()
    await asyncio.sleep(duration)
    elapsed = time.perf_counter() - t0
    watcher.cancel()
    seen = {"lags": lags, "steady": steady, "late": late, "loop_lags": loop_lags,
            "results": dict(results), "full_gcs": full_gcs, "young_gcs": young_gcs,
            "elapsed": elapsed, "start_seconds": start_seconds}
    await asyncio.to_thread(Path(out).write_text, json.dumps(seen))
    await daemon.shutdown()


def main() -> None:
    """Command line entry point (arguments as scale.py passes them)."""
    config, listen, duration, out, thresholds = sys.argv[1:]
    asyncio.run(run(config, listen, float(duration), out,
                    tuple(int(t) for t in thresholds.split(",") if t)))


if __name__ == "__main__":
    main()

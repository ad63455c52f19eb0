"""The embedded simulator under a flood: a healthy series' TTFT error and the process's peak
memory while another local client sends the simulator the largest requests its bounds allow,
with the simulator on the prober's own event loop (as before issue 36) and on its own thread
(`start_simulator_thread`, as `serve` and `probe` host it now).

The healthy series probes the truth server (`benchmarks.truth_server`, its own process: TTFT
200 ms, 16 tokens 10 ms apart) through the real `Prober` every 0.5 s, with the daemon's GIL
switch interval; the TTFT error is the measured TTFT minus the truth server's own (arrival to
first write). The flood is a separate process keeping `--flood` requests in flight to the
embedded simulator, each asking for the bound (`x-sim-output-tokens` 16,384 at no delay, one
token a chunk). Before the bounds, one request could ask for 10^8 tokens: it grew memory by
gigabytes.

    python -m benchmarks.simulator_host [--duration 10] [--flood 4] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import statistics
import sys
import time
from typing import Any

import structlog

from benchmarks.common import TruthProcess, machine_line, stop_process, table, truth_server
from exporter.config import SimulatedModel, SimulatorConfig, parse_config
from exporter.config.schema import SIM_MAX_TOKENS
from exporter.probe.prober import Prober
from exporter.simulator import start_simulator, start_simulator_thread
from exporter.simulator.thread import SWITCH_INTERVAL
from tests.conftest import free_port

TTFT = 0.2
FLOOD = """
import asyncio, sys, aiohttp
url, n, tokens = sys.argv[1], int(sys.argv[2]), sys.argv[3]
body = {"model": "flood", "stream": True, "messages": [{"role": "user", "content": "x"}]}
headers = {"x-sim-output-tokens": tokens, "x-sim-ttft": "0", "x-sim-tpot": "0"}
async def one(session):
    while True:
        try:
            async with session.post(url, json=body, headers=headers) as r:
                async for _ in r.content.iter_any():
                    pass
        except aiohttp.ClientError:
            await asyncio.sleep(0.05)
async def main():
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(one(session) for _ in range(n)))
asyncio.run(main())
"""


def _config() -> SimulatorConfig:
    return SimulatorConfig(listen=f"127.0.0.1:{free_port()}", models={
        "flood": SimulatedModel(ttft=0.0, tpot=0.0, jitter=0.0, output_tokens=SIM_MAX_TOKENS)})


async def _phase(truth: TruthProcess, threaded: bool, duration: float,
                 flood: int) -> dict[str, Any]:
    config = _config()
    sim: Any = (await start_simulator_thread(config) if threaded
                else await start_simulator(config))
    series = parse_config({
        "global": {"timeout": "10s"}, "probes": {"p": {"prompt": "hi", "max_tokens": 16}},
        "targets": [{"name": "t", "base_url": truth.base_url, "models": ["healthy"]}]},
        env={}).series[0]
    proc = None
    if flood:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", FLOOD, sim.url + "/chat/completions", str(flood),
            str(SIM_MAX_TOKENS))
    errors: list[float] = []
    durations: list[float] = []
    try:
        async with Prober() as prober:
            await asyncio.sleep(0.5)  # the flood is under way
            await truth.records()  # forget the warm-up
            end = time.monotonic() + duration
            while time.monotonic() < end:
                result = await prober.probe(series)
                records = await truth.records()
                served = [r for r in records.values() if r["writes"]]
                if result.timings.ttft is not None and served:
                    errors.append(result.timings.ttft - (served[-1]["writes"][0]
                                                         - served[-1]["arrived"]))
                if result.timings.duration is not None:
                    durations.append(result.timings.duration)
                await asyncio.sleep(0.5)
    finally:
        if proc is not None:
            await stop_process(proc)
        await sim.close()
    errors.sort()
    return {"probes": len(errors),
            "p50": statistics.median(errors) if errors else float("nan"),
            "p95": errors[int(0.95 * (len(errors) - 1))] if errors else float("nan"),
            "max": errors[-1] if errors else float("nan"),
            "duration": statistics.median(durations) if durations else float("nan")}


async def main(args: argparse.Namespace) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sys.setswitchinterval(SWITCH_INTERVAL)  # as the daemon runs
    rows = []
    async with truth_server(ttft=TTFT, tpot=0.01, tokens=16) as truth:
        for threaded in (False, True):
            for flood in (0, args.flood):
                rows.append(await _row(truth, threaded, args.duration, flood))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(machine_line())
    print(table(["simulator on", "flood in flight", "probes", "TTFT error p50 ms",
                 "p95 ms", "max ms", "probe duration p50 ms (≈ 360 idle)"], rows))
    print(f"peak RSS of this process over all phases: {peak:.0f} MiB")


async def _row(truth: TruthProcess, threaded: bool, duration: float, flood: int) -> list[Any]:
    out = await _phase(truth, threaded, duration, flood)
    return ["own thread" if threaded else "prober's loop",
            f"{flood} × {SIM_MAX_TOKENS:,} tokens" if flood else "none",
            out["probes"], f"{out['p50'] * 1000:.1f}", f"{out['p95'] * 1000:.1f}",
            f"{out['max'] * 1000:.1f}", f"{out['duration'] * 1000:.0f}"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--flood", type=int, default=4)
    parser.add_argument("--smoke", action="store_true", help="a 1 s run of each phase")
    parsed = parser.parse_args()
    if parsed.smoke:
        parsed.duration = 1.0
    asyncio.run(main(parsed))

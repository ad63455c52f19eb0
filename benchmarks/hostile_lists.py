"""Hostile lists: the daemon's peak memory and a healthy series' TTFT error while a discovering
target's gateway answers every refresh with a model list built to cost more than its bytes.

Three processes: the truth server (`benchmarks.truth_server`: a healthy 1 s series, with the
request's arrival and each token's write recorded), the real `Daemon` (a child, as in
`benchmarks.hostile`), and this script, which serves the gateway (`tests.security.hostile.
HostileGateway`, refreshed every `--refresh` s, its models excluded so only the lists cost
anything), scrapes `/metrics` every 0.25 s and reads the daemon's resident memory
(`/proc/<pid>/status`: VmRSS every 0.1 s, VmHWM at each phase's end). In the quiet phase the
gateway lists two models; in the hostile ones a list of just under 16 MiB of tiny JSON
containers (the attack of issue 36: `[],` about 5.6 million times), then of short strings, then
tiny containers just under the structure bound (the most a list can make the daemon parse).

    python -m benchmarks.hostile_lists [--duration 20] [--refresh 2] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml
from aiohttp import web

from benchmarks.common import ROOT, machine_line, stop_process, table, truth_server
from benchmarks.hostile import (
    HEALTHY,
    Phases,
    daemon_ready,
    phase_row,
    scrape_for,
    start_daemon_child,
    write_files,
)
from exporter.providers.gateway import max_values
from tests.conftest import free_port
from tests.security.hostile import HOSTILE_LISTS, LIST_SIZE, HostileGateway

# Phase → its body: 16 MiB lists (refused while they arrive), and tiny lists just under the
# structure bound of the default `max_models` (parsed: the most a list can cost).
AT_BOUND = "tiny lists under the bound"
ATTACKS = {"many tiny lists": HOSTILE_LISTS["many tiny lists"](LIST_SIZE),
           "many short strings": HOSTILE_LISTS["many short strings"](LIST_SIZE),
           AT_BOUND: HOSTILE_LISTS["many tiny lists"](3 * (max_values(100) - 8) // 2)}


def memory_mb(pid: int, field: str) -> float:
    """A `/proc/<pid>/status` memory field (VmRSS, VmHWM) in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


async def watch_rss(pid: int, seconds: float) -> float:
    """The highest VmRSS seen every 0.1 s for `seconds`."""
    peak = 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, memory_mb(pid, "VmRSS"))
        await asyncio.sleep(0.1)
    return peak


async def phase(url: str, pid: int, seconds: float) -> tuple[tuple[list[float], int], float]:
    """Scrapes and the peak resident memory of one phase."""
    scrapes, peak = await asyncio.gather(scrape_for(url, seconds), watch_rss(pid, seconds))
    return scrapes, peak


async def run(args: argparse.Namespace) -> None:
    """Quiet phase, then one hostile phase per attack; print the table."""
    gateway = HostileGateway()
    runner = web.AppRunner(gateway.app(), access_log=None)
    await runner.setup()
    gateway_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", gateway_port).start()
    bodies = {name: body for name, body in ATTACKS.items() if not args.smoke or
              name != AT_BOUND}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    results: dict[str, tuple[tuple[list[float], int], float, float, int]] = {}
    try:
        async with truth_server(ttft=0.2, tpot=0.02, tokens=20) as truth:
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                config, web_config = write_files(folder, truth.base_url, 0)
                data = yaml.safe_load(config.read_text())
                data["global"]["allow_short_intervals"] = True
                data["targets"] = [data["targets"][0], {
                    "name": "gateway", "base_url": f"http://127.0.0.1:{gateway_port}/v1",
                    "discover": {"refresh": f"{args.refresh:g}s", "exclude": ["."]}}]
                config.write_text(yaml.safe_dump(data))
                log = folder / "daemon.log"
                daemon = await start_daemon_child(config, web_config, port, folder, env)
                phases = Phases(log)
                try:
                    await daemon_ready(daemon, log)
                    load_before = machine_line()
                    await asyncio.sleep(args.warm_up)
                    for name in ("quiet", *bodies):
                        gateway.models = bodies.get(name, gateway.models)
                        before = gateway.requests
                        phases.mark(name)
                        scrapes, peak = await phase(url, daemon.pid, args.duration)
                        phases.mark(f"{name} end")
                        results[name] = (scrapes, peak, memory_mb(daemon.pid, "VmHWM"),
                                         gateway.requests - before)
                    assert daemon.stdin is not None
                    daemon.stdin.close()
                    try:
                        await asyncio.wait_for(daemon.wait(), 60)
                        probes = json.loads((folder / "daemon.json").read_text())
                    except TimeoutError:
                        print("the daemon did not stop within 60 s: its probes are unknown")
                        probes = []
                finally:
                    await stop_process(daemon)
            records = await truth.records()
    finally:
        await runner.cleanup()

    rows = []
    for name, (scrapes, peak, high, lists) in results.items():
        start, end = phases.span(name, f"{name} end")
        row = phase_row(name, scrapes, [p for p in probes if start <= p["at"] < end], records,
                        phases.log_rate(name, f"{name} end"))
        rows.append([*row[:1], str(lists), f"{peak:.0f}", f"{high:.0f}", *row[1:-1]])
    print(f"### hostile lists ({load_before})\n")
    print(f"a discovering target refreshed every {args.refresh:g} s beside the healthy series "
          f"({'/'.join(HEALTHY)}, 1 s); hostile lists of {LIST_SIZE / 2**20:.1f} MiB "
          f"(under the bound: {len(ATTACKS[AT_BOUND]) / 2**10:.0f} KiB); "
          f"{args.duration:g} s per phase; scrapes every 0.25 s\n")
    print(table(["phase", "lists served", "peak RSS MB", "VmHWM MB", "scrapes",
                 "scrape p50 ms", "p95", "max", "failed", "probes", "probe failures",
                 "TTFT err p50 ms", "p95", "max"], rows))


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--refresh", type=float, default=2.0, help="discovery refresh, s")
    parser.add_argument("--warm-up", type=float, default=5.0)
    parser.add_argument("--smoke", action="store_true", help="tiny CI run (seconds)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        args.duration, args.refresh, args.warm_up = 3.0, 1.0, 2.0
    started = time.monotonic()
    asyncio.run(run(args))
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()

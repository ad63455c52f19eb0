"""Hostile upstream: scrape latency and a healthy series' TTFT error while other targets answer
every probe with a refusal built to be slow to parse.

Three processes: the truth server (`benchmarks.truth_server`: a healthy 1 s series, with the
request's arrival and each token's write recorded), the real `Daemon` (a child, as in
`benchmarks.hostile`), and this script, which serves the hostile targets and scrapes `/metrics`
every 0.25 s. Each hostile series (`--hostile`, default 20, at 1 s) gets a 400 whose body is one
of the attacks of tests/security/test_upstream_text.py at 64 KiB — the run of name characters
that once froze the daemon for 18.5 s, a rule's prefix over and over, a list that never ends,
the Python-repr message key again and again, an echo of the request. In the quiet phase the
same targets answer a normal stream, so the two phases differ only in the bodies.

    python -m benchmarks.hostile_upstream [--duration 20] [--hostile 20] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
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
from tests.conftest import free_port
from tests.security.hostile import REFUSALS

SIZE = 64 * 1024  # what the prober reads of an error body
OK_STREAM = (b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
             b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
             b"data: [DONE]\n\n")


class Upstream:
    """The hostile targets' server: normal streams until `hostile` is set, then refusals."""

    def __init__(self) -> None:
        self.hostile = False
        self.bodies = itertools.cycle([build(SIZE) for build in REFUSALS.values()])
        self.refusals = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        if self.hostile:
            self.refusals += 1
            return web.Response(status=400, body=next(self.bodies),
                                content_type="application/json")
        return web.Response(body=OK_STREAM, content_type="text/event-stream")


async def run(args: argparse.Namespace) -> None:
    """Quiet phase, then the hostile phase; print the table."""
    upstream = Upstream()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    upstream_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", upstream_port).start()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        async with truth_server(ttft=0.2, tpot=0.02, tokens=20) as truth:
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                config, web_config = write_files(folder, truth.base_url, 0)
                data = yaml.safe_load(config.read_text())
                data["targets"] = [data["targets"][0], {
                    "name": "hostile", "base_url": f"http://127.0.0.1:{upstream_port}/v1",
                    "models": [f"h{i}" for i in range(args.hostile)]}]
                config.write_text(yaml.safe_dump(data))
                log = folder / "daemon.log"
                daemon = await start_daemon_child(config, web_config, port, folder, env)
                phases = Phases(log)
                try:
                    await daemon_ready(daemon, log)
                    load_before = machine_line()
                    await asyncio.sleep(args.warm_up)
                    phases.mark("quiet")
                    quiet = await scrape_for(url, args.duration)
                    phases.mark("quiet end")
                    upstream.hostile = True
                    phases.mark("hostile")
                    attacked = await scrape_for(url, args.duration)
                    phases.mark("hostile end")
                    assert daemon.stdin is not None
                    daemon.stdin.close()
                    try:
                        await asyncio.wait_for(daemon.wait(), 60)
                        probes = json.loads((folder / "daemon.json").read_text())
                    except TimeoutError:  # a daemon frozen by what it parses (the old parser)
                        print("the daemon did not stop within 60 s: its probes are unknown")
                        probes = []
                finally:
                    await stop_process(daemon)
            records = await truth.records()
    finally:
        await runner.cleanup()

    def row(name: str, scrapes: tuple[list[float], int], phase: str) -> list[str]:
        start, end = phases.span(phase, f"{phase} end")
        return phase_row(name, scrapes, [p for p in probes if start <= p["at"] < end], records,
                         phases.log_rate(phase, f"{phase} end"))

    print(f"### hostile upstream ({load_before})\n")
    print(f"{args.hostile} hostile series at 1 s beside the healthy one ({'/'.join(HEALTHY)}); "
          f"hostile phase: {upstream.refusals} refusal bodies of {SIZE // 1024} KiB "
          f"({upstream.refusals / args.duration:.1f}/s, {len(REFUSALS)} kinds); "
          f"{args.duration:g} s per phase; scrapes every 0.25 s\n")
    print(table(["phase", "scrapes", "scrape p50 ms", "p95", "max", "failed", "probes",
                 "probe failures", "TTFT err p50 ms", "p95", "max", "log B/s"],
                [row("quiet (normal answers)", quiet, "quiet"),
                 row("hostile refusals", attacked, "hostile")]))


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--hostile", type=int, default=20, help="hostile series at 1 s")
    parser.add_argument("--warm-up", type=float, default=5.0)
    parser.add_argument("--smoke", action="store_true", help="tiny CI run (seconds)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        args.duration, args.hostile, args.warm_up = 3.0, 3, 2.0
    started = time.monotonic()
    asyncio.run(run(args))
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()

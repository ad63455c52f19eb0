"""Scale: thousands of configured series against the simulator, for a fixed duration.

Three processes: the simulator (`llm-probe-exporter simulate`), the real `Daemon` (in a child
process of this script, with a hook that keeps every scheduler-lag observation and a 50 ms
event-loop lag watcher), and this script, which samples the daemon's CPU and RSS once a second
and scrapes /metrics like Prometheus would (every `--scrape-every` seconds, plain text).

    python -m benchmarks.scale [--series 1000,5000] [--interval 30] [--duration 90] [--smoke]

Reports scheduler lag p50/p99/max (how late probes start versus their grid, semaphore wait
included), event-loop lag, CPU %, RSS, probes/s, /metrics scrape time and size (per series), and
which metric families make up the page.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import gzip
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from benchmarks.common import machine_line, ms, pct, stop_process, table
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
MODELS = 10
PROBES = 10
LOOP_LAG_PERIOD = 0.05


def write_configs(folder: Path, series: int, interval: float, sim_port: int,
                  concurrency: int) -> tuple[Path, Path]:
    """The simulator's config and the daemon's (series = targets × 10 models × 10 probes)."""
    models = {f"m{i}": {"ttft": "50ms", "tpot": "5ms", "output_tokens": 16, "jitter": 0.1}
              for i in range(MODELS)}
    sim = folder / "simulator.yaml"
    sim.write_text(yaml.safe_dump({
        "simulator": {"listen": f"127.0.0.1:{sim_port}", "models": models},
        "probes": {"p": {"prompt": "hi"}},
        "targets": [{"name": "sim", "base_url": f"http://127.0.0.1:{sim_port}/v1",
                     "models": ["m0"]}],
    }))
    targets = max(1, series // (MODELS * PROBES))
    per_target_models = [f"m{i}" for i in range(min(MODELS, series))]
    probes = {f"p{j}": {"prompt": f"Probe {j}: say hello.", "max_tokens": 32}
              for j in range(min(PROBES, max(1, series // len(per_target_models))))}
    daemon = folder / "daemon.yaml"
    daemon.write_text(yaml.safe_dump({
        "global": {"interval": f"{interval}s", "timeout": "10s",
                   "max_concurrency": concurrency, "max_series": max(10_000, series)},
        "probes": probes,
        "targets": [{"name": f"t{t:03d}", "base_url": f"http://127.0.0.1:{sim_port}/v1",
                     "models": per_target_models} for t in range(targets)],
    }))
    return sim, daemon


# -- the daemon child -------------------------------------------------------------------------

async def _child(config_path: str, listen: str, duration: float, out: str) -> None:
    """Run the real Daemon for `duration` seconds after start, keeping raw lag samples."""
    from exporter.config import load_config
    from exporter.daemon import Daemon
    from exporter.log import configure_logging

    configure_logging("error", "json")
    config = load_config(config_path)
    daemon = Daemon(Path(config_path), listen)
    lags: list[float] = []
    loop_lags: list[float] = []
    results = Counter()
    observe_lag, record = daemon.metrics.observe_lag, daemon.metrics.record

    def keep_lag(seconds: float) -> None:
        lags.append(seconds)
        observe_lag(seconds)

    def keep_result(result: Any) -> None:
        results[result.result.value] += 1
        record(result)

    gc_pauses: list[float] = []
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:  # how long full collections stop us
        if info.get("generation") != 2:
            return
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            gc_pauses.append(time.perf_counter() - gc_started[0])

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
    start_seconds = time.perf_counter() - started
    print("READY", flush=True)
    watcher = asyncio.create_task(watch_loop())
    t0 = time.perf_counter()
    await asyncio.sleep(duration)
    elapsed = time.perf_counter() - t0
    watcher.cancel()
    snapshot = {"lags": lags, "loop_lags": loop_lags, "results": dict(results),
                "gc_pauses": gc_pauses,
                "elapsed": elapsed, "start_seconds": start_seconds}
    await asyncio.to_thread(Path(out).write_text, json.dumps(snapshot))
    await daemon.shutdown()


# -- the parent -------------------------------------------------------------------------------

class ProcStats:
    """CPU seconds and RSS of a process from /proc (Linux; no psutil needed)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")

    def cpu(self) -> float:
        """User + system CPU seconds so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick

    def memory(self, key: str = "VmRSS") -> int:
        """Resident set size now (VmRSS) or its peak (VmHWM), bytes."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return 0


def family_sizes(text: str) -> Counter[str]:
    """Bytes of the exposition by metric family (bucket lines counted apart)."""
    sizes: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("#"):
            sizes["(HELP/TYPE)"] += len(line) + 1
            continue
        name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
        if not name:
            continue
        metric = name.group(0)
        base = re.sub(r"_(bucket|sum|count|total|created)$", "", metric)
        kind = "buckets" if metric.endswith("_bucket") else "samples"
        sizes[f"{base} ({kind})"] += len(line) + 1
    return sizes


async def scrape(session: aiohttp.ClientSession, url: str, gzip_ok: bool = False
                 ) -> tuple[float, bytes]:
    """One scrape: seconds until the whole body is read, and the body (decompressed)."""
    headers = {"Accept": "text/plain", "Accept-Encoding": "gzip" if gzip_ok else "identity"}
    start = time.perf_counter()
    async with session.get(url, headers=headers, auto_decompress=False) as resp:
        body = await resp.read()
    spent = time.perf_counter() - start
    return spent, body


async def run_level(series: int, args: argparse.Namespace) -> dict[str, Any]:
    """Simulator + daemon for one series count; measure for `args.duration` seconds."""
    sim_port, port = free_port(), free_port()
    interval = args.interval
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sim_config, config = write_configs(folder, series, interval, sim_port, args.concurrency)
        out = folder / "child.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        sim = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "exporter", "simulate", "--listen", f"127.0.0.1:{sim_port}",
            "--config.file", str(sim_config), "--log.level", "error",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, cwd=ROOT,
            env=env)
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.scale", "--child", str(config),
            f"127.0.0.1:{port}", str(args.duration), str(out),
            stdout=asyncio.subprocess.PIPE, cwd=ROOT, env=env)
        try:
            assert child.stdout is not None
            line = (await child.stdout.readline()).decode()
            if line.strip() != "READY":
                raise RuntimeError(f"daemon did not start: {line!r}")
            proc = ProcStats(child.pid)
            cpu0, wall0 = proc.cpu(), time.perf_counter()
            rss: list[int] = []
            scrapes: list[tuple[float, int]] = []
            last_body = b""
            url = f"http://127.0.0.1:{port}/metrics"
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
                next_scrape = wall0 + args.scrape_every
                while time.perf_counter() - wall0 < args.duration - 1.0:
                    rss.append(proc.memory())
                    if time.perf_counter() >= next_scrape:
                        next_scrape = time.perf_counter() + args.scrape_every
                        spent, last_body = await scrape(s, url)
                        scrapes.append((spent, len(last_body)))
                    await asyncio.sleep(1.0)
                spent_gz, body_gz = await scrape(s, url, gzip_ok=True)
            cpu1, wall1 = proc.cpu(), time.perf_counter()
            peak = proc.memory("VmHWM")
            await asyncio.wait_for(child.wait(), args.duration + 60)
            data = json.loads(await asyncio.to_thread(out.read_text))
        finally:
            await stop_process(child, 10)
            await stop_process(sim, 10)
    if not last_body:  # no scrape during the run: size the final (gzipped) one
        last_body = gzip.decompress(body_gz) if body_gz[:2] == b"\x1f\x8b" else body_gz
    text = last_body.decode()
    sizes = family_sizes(text)
    finished = sum(data["results"].values())
    return {
        "series": series, "interval": interval, "lags": data["lags"],
        "loop_lags": data["loop_lags"], "results": data["results"],
        "gc_pauses": data["gc_pauses"],
        "probes_per_s": finished / data["elapsed"], "cpu": (cpu1 - cpu0) / (wall1 - wall0),
        "rss_max": max(rss), "rss_end": rss[-1], "rss_peak": peak, "scrapes": scrapes,
        "size": len(last_body), "gzip_size": len(body_gz), "gzip_seconds": spent_gz,
        "sizes": sizes, "start_seconds": data["start_seconds"],
        "lines": sum(1 for ln in text.splitlines() if ln and not ln.startswith("#")),
    }


async def scale(args: argparse.Namespace) -> None:
    """Run every level, then print the tables."""
    print(f"# scale — {machine_line()}")
    print(f"daemon: real Daemon class in a child process; simulator: `llm-probe-exporter "
          f"simulate` (ttft 50 ms, tpot 5 ms, 16 tokens); interval {args.interval:g}s, "
          f"max_concurrency {args.concurrency}, {args.duration:g}s per level, /metrics scraped "
          f"every {args.scrape_every:g}s\n", flush=True)
    levels = []
    for series in args.series:
        level = await run_level(series, args)
        levels.append(level)
        print(f"{series} series done: {level['results']}", flush=True)
    rows = []
    for lv in levels:
        times = [t for t, _ in lv["scrapes"]]
        rows.append([
            lv["series"], f"{lv['probes_per_s']:.1f}", ms(pct(lv["lags"], 50), 2),
            ms(pct(lv["lags"], 99), 2), ms(max(lv["lags"], default=None), 1),
            ms(pct(lv["loop_lags"], 99), 2), ms(max(lv["loop_lags"], default=None), 1),
            f"{len(lv['gc_pauses'])} / {ms(max(lv['gc_pauses'], default=None), 0)}",
            f"{lv['cpu'] * 100:.0f}%", f"{lv['rss_max'] / 2**20:.0f}",
            f"{lv['rss_peak'] / 2**20:.0f}",
            ms(pct(times, 50), 0) if times else "–", ms(max(times, default=None), 0),
            f"{lv['size'] / 2**20:.1f}", f"{lv['size'] / lv['series'] / 1024:.1f}",
            f"{lv['gzip_size'] / 2**20:.2f}", f"{lv['start_seconds']:.1f}",
        ])
    print()
    print(table(["series", "probes/s", "sched lag p50 ms", "p99", "max", "loop lag p99 ms",
                 "max", "full GCs / max ms", "CPU", "RSS MiB", "peak", "scrape p50 ms", "max",
                 "/metrics MiB", "KiB / series", "gzip MiB", "start s"], rows))
    last = levels[-1]
    print(f"\n## What the /metrics page of {last['series']} series is made of "
          f"({last['lines']:,} samples, {last['size']:,} bytes)\n")
    total = sum(last["sizes"].values())
    rows = [[name, f"{size / last['series']:,.0f}", f"{size / total:.1%}"]
            for name, size in last["sizes"].most_common(14)]
    print(table(["family (lines)", "bytes / series", "share"], rows))
    print()
    for lv in levels:
        if lv["series"] == 5000 or lv is last:
            p99 = pct(lv["lags"], 99) or 0.0
            scrape_max = max((t for t, _ in lv["scrapes"]), default=float("nan"))
            print(f"{lv['series']} series: scheduler lag p99 < 20 ms: "
                  f"{'met' if p99 < 0.02 else 'MISSED'} ({p99 * 1000:.2f} ms); "
                  f"RSS < 200 MB: {'met' if lv['rss_max'] < 200e6 else 'MISSED'} "
                  f"({lv['rss_max'] / 1e6:.0f} MB, peak {lv['rss_peak'] / 1e6:.0f} MB); "
                  "/metrics scrape < 300 ms: "
                  f"{'met' if scrape_max < 0.3 else 'MISSED'} ({scrape_max * 1000:.0f} ms)")


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _, config, listen, duration, out = argv
        asyncio.run(_child(config, listen, float(duration), out))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", default="1000,5000")
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--duration", type=float, default=90.0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--scrape-every", type=float, default=10.0)
    parser.add_argument("--smoke", action="store_true", help="tiny CI run (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.series, args.interval, args.duration, args.scrape_every = "20", 1.0, 4.0, 1.0
    args.series = [int(x) for x in args.series.split(",")]
    asyncio.run(scale(args))


if __name__ == "__main__":
    main()

"""Scale: thousands of configured series against the simulator, for a fixed duration.

Three processes: the simulator (`llm-probe-exporter simulate`), the real `Daemon` (in a child
process of this script, with the process settings `serve` makes, a hook that keeps every
scheduler-lag observation and a 50 ms event-loop lag watcher), and this script, which samples the
daemon's CPU and RSS once a second and scrapes /metrics like Prometheus would (every
`--scrape-every` seconds; `--format protobuf` asks what a Prometheus with native histograms asks
for, `text` what one without them asks for; `--gzip` as Prometheus does, off by default).

    python -m benchmarks.scale [--series 1000,5000] [--format protobuf] [--interval 30]
                               [--duration 90] [--tree NAME=DIR ...] [--smoke]

`--tree NAME=DIR` runs the daemon from another source tree too (`git archive` an older commit
there; `NAME=DIR@G0,G1,G2` with other GC thresholds), alternating with this one at every level:
A/B in one run on a shared machine.

Reports scheduler lag p50/p99/max (how late probes start versus their grid, semaphore wait
included), event-loop lag, CPU %, RSS, probes/s, /metrics scrape time and size (per series), and
which metric families make up the page.
"""

from __future__ import annotations

import argparse
import asyncio
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
from tests.protodecode import read_varint

# What Prometheus sends: with native histograms on, protobuf first (2.42's header).
ACCEPT = {
    "protobuf": "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                "encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.1",
    "text": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
    "openmetrics": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
}

ROOT = Path(__file__).resolve().parent.parent
# The daemon's process runs this script, which imports nothing but the exporter (the benchmark's
# own modules would add ~25 MiB to the RSS it measures).
CHILD = Path(__file__).resolve().with_name("scale_daemon.py")
MODELS = 10
PROBES = 10


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


def protobuf_family_sizes(data: bytes) -> tuple[Counter[str], int]:
    """Bytes of a delimited protobuf page by metric family, and its number of Metric records."""
    sizes: Counter[str] = Counter()
    records = position = 0
    while position < len(data):
        length, start = read_varint(data, position)
        end = start + length
        name = ""
        field = start
        while field < end:  # MetricFamily: name = 1, help = 2, type = 3, metric = 4
            tag, field = read_varint(data, field)
            if tag & 7 == 0:
                _, field = read_varint(data, field)
                continue
            size, field = read_varint(data, field)
            if tag >> 3 == 1:
                name = data[field:field + size].decode()
            elif tag >> 3 == 4:
                records += 1
            field += size
        sizes[name] += end - position
        position = end
    return sizes, records


def page_sizes(body: bytes, fmt: str) -> tuple[Counter[str], int]:
    """Bytes by family and the number of samples (text) or Metric records (protobuf)."""
    if fmt == "protobuf":
        return protobuf_family_sizes(body)
    text = body.decode()
    return family_sizes(text), sum(1 for ln in text.splitlines() if ln and not ln.startswith("#"))


async def scrape(session: aiohttp.ClientSession, url: str, fmt: str, gzip_ok: bool = False
                 ) -> tuple[float, int, bytes]:
    """One scrape: seconds until the whole body is read, bytes sent, the body (decompressed)."""
    headers = {"Accept": ACCEPT[fmt], "Accept-Encoding": "gzip" if gzip_ok else "identity"}
    start = time.perf_counter()
    async with session.get(url, headers=headers, auto_decompress=False) as resp:
        body = await resp.read()
    spent = time.perf_counter() - start
    sent = len(body)
    if resp.headers.get("Content-Encoding") == "gzip":
        body = await asyncio.to_thread(gzip.decompress, body)
    return spent, sent, body


async def run_level(series: int, tree: Path, gc_threshold: str, args: argparse.Namespace
                    ) -> dict[str, Any]:
    """Simulator + daemon (from `tree`) for one series count; measure for `args.duration` s."""
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
        # `exporter` comes from `tree` (first on the path), the child script from this tree.
        child = await asyncio.create_subprocess_exec(
            sys.executable, str(CHILD), str(config), f"127.0.0.1:{port}",
            str(args.duration), str(out), gc_threshold, stdout=asyncio.subprocess.PIPE,
            cwd=folder,
            env={**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}"})
        try:
            assert child.stdout is not None
            line = (await child.stdout.readline()).decode()
            if line.strip() != "READY":
                raise RuntimeError(f"daemon did not start: {line!r}")
            proc = ProcStats(child.pid)
            cpu0, wall0 = proc.cpu(), time.perf_counter()
            rss: list[int] = []
            rss_times: list[float] = []
            scrapes: list[tuple[float, int]] = []
            scrape_times: list[float] = []
            last_body = b""
            url = f"http://127.0.0.1:{port}/metrics"
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
                next_scrape = wall0 + args.scrape_every
                while time.perf_counter() - wall0 < args.duration - 1.0:
                    rss.append(proc.memory())
                    rss_times.append(time.perf_counter())
                    if args.scrape_every and time.perf_counter() >= next_scrape:
                        next_scrape = time.perf_counter() + args.scrape_every
                        started = time.perf_counter()
                        spent, sent, last_body = await scrape(s, url, args.format, args.gzip)
                        scrapes.append((spent, sent))
                        scrape_times.append(started)
                    await asyncio.sleep(1.0)
                _, gzip_size, final = await scrape(s, url, args.format, gzip_ok=True)
            cpu1, wall1 = proc.cpu(), time.perf_counter()
            peak = proc.memory("VmHWM")
            await asyncio.wait_for(child.wait(), args.duration + 60)
            data = json.loads(await asyncio.to_thread(out.read_text))
        finally:
            await stop_process(child, 10)
            await stop_process(sim, 10)
    sizes, samples = page_sizes(last_body or final, args.format)
    finished = sum(data["results"].values())
    return {
        "series": series, "interval": interval, "lags": data["lags"],
        "loop_lags": data["loop_lags"], "results": data["results"],
        "full_gcs": [seconds for _, seconds in data["full_gcs"]], "steady": data["steady"],
        "young_gcs": [seconds for _, seconds, _ in data["young_gcs"]],
        "events": {"late": data["late"], "full_gcs": data["full_gcs"],
                   "young_gcs": data["young_gcs"], "rss": list(zip(rss_times, rss, strict=True)),
                   "scrapes": [(t, spent) for t, (spent, _) in zip(scrape_times, scrapes,
                                                                    strict=True)]},
        "probes_per_s": finished / data["elapsed"], "cpu": (cpu1 - cpu0) / (wall1 - wall0),
        "rss_max": max(rss), "rss_end": rss[-1], "rss_peak": peak, "scrapes": scrapes,
        "size": len(last_body or final), "gzip_size": gzip_size, "sizes": sizes,
        "samples": samples, "start_seconds": data["start_seconds"],
    }


def parse_trees(specs: list[str], gc_threshold: str) -> dict[str, tuple[Path, str]]:
    """`NAME=DIR[@G0,G1,G2]` options as (source tree, GC thresholds), this one first."""
    trees = {"this": (ROOT, gc_threshold)}
    for spec in specs:
        name, _, rest = spec.partition("=")
        folder, _, thresholds = rest.partition("@")
        if not name or not (Path(folder) / "exporter" / "__init__.py").is_file():
            raise SystemExit(f"--tree {spec!r}: want NAME=DIR[@G0,G1,G2], DIR holding exporter/")
        trees[name] = (Path(folder).resolve(), thresholds or gc_threshold)
    return trees


async def scale(args: argparse.Namespace) -> None:
    """Run every level (each tree in turn, A B A B), then print the tables."""
    trees = parse_trees(args.tree, args.gc_threshold)
    print(f"# scale — {machine_line()}")
    print(f"daemon: real Daemon class in a child process; simulator: `llm-probe-exporter "
          f"simulate` (ttft 50 ms, tpot 5 ms, 16 tokens); interval {args.interval:g}s, "
          f"max_concurrency {args.concurrency}, {args.duration:g}s per level, /metrics scraped "
          f"every {args.scrape_every:g}s as {args.format}"
          f"{' with gzip' if args.gzip else ''}\n", flush=True)
    levels = []
    for series in args.series:
        for round_ in range(args.rounds):
            order = list(trees.items())
            if round_ % 2:
                order.reverse()
            for name, tree in order:
                level = await run_level(series, *tree, args)
                level["tree"] = name
                levels.append(level)
                print(f"{series} series, {name} done ({machine_line()}): {level['results']}",
                      flush=True)
    if args.events:
        args.events.write_text(json.dumps([{"tree": lv["tree"], "series": lv["series"],
                                            **lv["events"]} for lv in levels]))
    rows = []
    for lv in levels:
        first, times = (lv["scrapes"][0][0], [t for t, _ in lv["scrapes"][1:]]) if lv[
            "scrapes"] else (None, [])
        rows.append([
            *([lv["tree"]] if len(trees) > 1 else []),
            lv["series"], f"{lv['probes_per_s']:.1f}", ms(pct(lv["lags"], 50), 2),
            ms(pct(lv["lags"], 99), 2), ms(max(lv["lags"], default=None), 1),
            ms(pct(lv["steady"], 99), 2), ms(max(lv["steady"], default=None), 1),
            ms(pct(lv["loop_lags"], 99), 2), ms(max(lv["loop_lags"], default=None), 1),
            f"{len(lv['full_gcs'])} / {ms(max(lv['full_gcs'], default=None), 0)}",
            f"{len(lv['young_gcs'])} / {ms(max(lv['young_gcs'], default=None), 0)}",
            f"{lv['cpu'] * 100:.0f}%", f"{lv['rss_max'] / 2**20:.0f}",
            f"{lv['rss_peak'] / 2**20:.0f}",
            ms(first, 0), ms(pct(times, 50), 0) if times else "–",
            ms(pct(times, 95), 0) if times else "–", ms(max(times, default=None), 0),
            f"{lv['size'] / 2**20:.1f}", f"{lv['size'] / lv['series'] / 1024:.1f}",
            f"{lv['gzip_size'] / 2**20:.2f}", f"{lv['start_seconds']:.1f}",
        ])
    print()
    print(table([*(["tree"] if len(trees) > 1 else []), "series", "probes/s",
                 "sched lag p50 ms", "p99", "max", "steady p99", "max", "loop lag p99 ms",
                 "max", "full GCs / max ms", "young GCs > 5 ms / max", "CPU", "RSS MiB",
                 "peak", "first scrape ms", "then p50", "p95", "max", "/metrics MiB",
                 "KiB / series", "gzip MiB", "start s"], rows))
    last = levels[-1]
    unit = "Metric records" if args.format == "protobuf" else "samples"
    print(f"\n## What the /metrics page of {last['series']} series is made of "
          f"({last['samples']:,} {unit}, {last['size']:,} bytes)\n")
    total = sum(last["sizes"].values())
    rows = [[name, f"{size / last['series']:,.0f}", f"{size / total:.1%}"]
            for name, size in last["sizes"].most_common(14)]
    print(table(["family", "bytes / series", "share"], rows))
    print()
    for lv in levels:
        if lv["series"] == 5000 or lv["series"] == last["series"]:
            p99 = pct(lv["lags"], 99) or 0.0
            steady = pct(lv["steady"], 99) or 0.0
            p95 = pct([t for t, _ in lv["scrapes"][1:]], 95)
            print(f"{lv['tree']}, {lv['series']} series: scheduler lag p99 < 20 ms: "
                  f"{'met' if p99 < 0.02 else 'MISSED'} ({p99 * 1000:.2f} ms; after the "
                  f"first-probe window {steady * 1000:.2f} ms); "
                  f"RSS < 200 MB: {'met' if lv['rss_max'] < 200e6 else 'MISSED'} "
                  f"({lv['rss_max'] / 1e6:.0f} MB, peak {lv['rss_peak'] / 1e6:.0f} MB); "
                  "/metrics scrape p95 (after the first) < 300 ms: "
                  + ("–" if p95 is None else
                     f"{'met' if p95 < 0.3 else 'MISSED'} ({p95 * 1000:.0f} ms)"))


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", default="1000,5000")
    parser.add_argument("--format", choices=sorted(ACCEPT), default="protobuf",
                        help="what the scraper asks for (default: protobuf, as a Prometheus "
                             "with native histograms)")
    parser.add_argument("--gzip", action="store_true",
                        help="scrape with Accept-Encoding: gzip (Prometheus does)")
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--duration", type=float, default=90.0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--scrape-every", type=float, default=10.0,
                        help="seconds between scrapes (0: none during the run)")
    parser.add_argument("--rounds", type=int, default=1, help="runs per level and tree")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=DIR[@G0,G1,G2]",
                        help="also run the daemon from this source tree (A/B), optionally with "
                             "other GC thresholds")
    parser.add_argument("--gc-threshold", metavar="G0,G1,G2", default="",
                        help="gc.set_threshold in the daemon after its start (A/B of the "
                             "daemon's own setting)")
    parser.add_argument("--events", type=Path, metavar="FILE",
                        help="write when probes started late, collections and scrapes ran "
                             "(JSON, on the monotonic clock) per level to FILE")
    parser.add_argument("--smoke", action="store_true", help="tiny CI run (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.series, args.interval, args.duration, args.scrape_every = "20", 1.0, 4.0, 1.0
    args.series = [int(x) for x in args.series.split(",")]
    asyncio.run(scale(args))


if __name__ == "__main__":
    main()

"""Hostile: scrape latency and a healthy series' TTFT error while clients attack the port.

Four processes: the truth server (`benchmarks.truth_server`, records when each request arrived
and each token was written), the real `Daemon` (a child of this script, basic auth with a cost-10
bcrypt hash, a healthy 1 s series on the truth server plus bulk series so a reload has work),
an attacker (another child), and this script, which scrapes `/metrics` with the right password
every 0.25 s on a kept-alive connection, as Prometheus does.

Phases, one run: warm-up, a quiet baseline, the same attack on a decoy server in another
process (what the attacker's load alone costs this machine), then the attack on the exporter's
port — 1,100 idle connections (reopened when closed), 50 slowloris clients, 500 concurrent wrong
passwords in a loop, and a reload flood (`POST /-/reload`, authenticated, 20 in a loop) — and
last a flood of requests that fail to parse (50 clients in a loop, each request carrying an
`Authorization` header with a control character, as a client's password would).

    python -m benchmarks.hostile [--duration 20] [--smoke]

TTFT error = the daemon's TTFT − the truth server's (first token write − request arrival),
matched by response id, on one CLOCK_MONOTONIC. Log B/s = bytes the daemon (at
`--log.level warn`, json) wrote per second of the phase.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import resource
import socket
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import yaml

from benchmarks.common import (
    ROOT,
    machine_line,
    ms,
    pct,
    stop_process,
    table,
    truth_server,
)
from tests.conftest import free_port

USER, PASSWORD = "prometheus", "s3cret"
HEALTHY = ("truth", "healthy", "short")
SCRAPE_EVERY = 0.25
# A request aiohttp's parser refuses: a control character inside a client's credentials.
MALFORMED_TOKEN = base64.b64encode(b"prometheus:malformed-guess")
MALFORMED = (b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic " + MALFORMED_TOKEN
             + b"\x01" + b"x" * 200 + b"\r\n\r\n")


def auth(password: str = PASSWORD) -> dict[str, str]:
    """A basic-auth header."""
    return {"Authorization": "Basic " + base64.b64encode(f"{USER}:{password}".encode()).decode()}


def more_descriptors() -> None:
    """Raise our soft fd limit to the hard limit (the attacker holds ~2,000 sockets)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def write_files(folder: Path, truth_url: str, bulk: int) -> tuple[Path, Path]:
    """The daemon's config (healthy series + bulk series) and its web config."""
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump({
        "global": {"interval": "1s", "timeout": "10s", "jitter": 0, "max_series": 20_000},
        "probes": {"short": {"prompt": "Say hello.", "max_tokens": 32}},
        "targets": [
            {"name": "truth", "base_url": truth_url, "models": ["healthy"]},
            {"name": "bulk", "base_url": truth_url, "interval": "1h",
             "models": [f"b{i}" for i in range(bulk)]},
        ],
    }))
    web = folder / "web.yml"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    web.write_text(yaml.safe_dump({"basic_auth_users": {USER: hashed}}))
    return config, web


# -- the daemon child -------------------------------------------------------------------------

async def _daemon(config_path: str, web: str, listen: str, out: str) -> None:
    """Run the real Daemon until its stdin closes, keeping each result of the healthy series."""
    from exporter.config import load_config
    from exporter.log import configure_logging
    from exporter.serve.daemon import Daemon

    configure_logging("warn", "json")  # warnings count: what a flood makes the daemon write
    daemon = Daemon(Path(config_path), listen, web_config=Path(web))
    daemon.owns_process = True  # GIL switch interval and GC settings, as `serve` makes them
    kept: list[dict[str, Any]] = []
    record = daemon.metrics.record

    def keep(result: Any) -> None:
        if result.key == HEALTHY:
            kept.append({"id": result.response_id, "ttft": result.timings.ttft,
                         "result": result.result.value, "at": time.monotonic()})
        record(result)

    daemon.metrics.record = keep  # type: ignore[method-assign]
    await daemon.start(load_config(config_path))
    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.buffer.read)  # until the parent closes it
    await asyncio.to_thread(Path(out).write_text, json.dumps(kept))
    await daemon.shutdown()


async def start_daemon_child(config: Path, web: Path, port: int, folder: Path,
                             env: dict[str, str]) -> asyncio.subprocess.Process:
    """The daemon child on 127.0.0.1:`port`, logging to `folder`/daemon.log, keeping the healthy
    series' results for `folder`/daemon.json."""
    with (folder / "daemon.log").open("wb") as log_file:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.hostile", "--daemon", str(config), str(web),
            f"127.0.0.1:{port}", str(folder / "daemon.json"), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=log_file, cwd=ROOT, env=env)


async def daemon_ready(daemon: asyncio.subprocess.Process, log: Path) -> None:
    """Wait for the daemon child's READY (its log in the error otherwise)."""
    assert daemon.stdout is not None
    line = (await daemon.stdout.readline()).decode()
    if line.strip() != "READY":
        logged = await asyncio.to_thread(log.read_text)
        raise RuntimeError(f"daemon did not start: {line!r} {logged}")


# -- the decoy child --------------------------------------------------------------------------

async def _decoy(port: int, duration: float) -> None:
    """A plain aiohttp server that refuses /metrics (401) and accepts reloads: the attacker's
    load without the exporter."""
    from aiohttp import web

    async def refuse(_request: web.Request) -> web.Response:
        return web.Response(status=401, text="Unauthorized\n")

    async def accept(_request: web.Request) -> web.Response:
        return web.Response(text="Config reloaded.\n")

    app = web.Application()
    app.router.add_post("/-/reload", accept)
    app.router.add_route("*", "/{tail:.*}", refuse)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("READY", flush=True)
    await asyncio.sleep(duration)
    await runner.cleanup()


# -- the attacker child -----------------------------------------------------------------------

async def _attack(url: str, duration: float, plan: dict[str, int], out: str) -> None:
    """For `duration`, as `plan` says: hold idle and slowloris connections, guess passwords,
    flood reloads, send requests that fail to parse."""
    idle, wrong, reloads = plan["idle"], plan["wrong"], plan["reloads"]
    more_descriptors()
    host, port = url.removeprefix("http://").split(":")
    loop = asyncio.get_running_loop()
    stop = loop.time() + duration
    stats: Counter[str] = Counter()

    async def connect() -> socket.socket | None:
        sock = socket.socket()
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, (host, int(port)))
        except OSError:
            sock.close()
            return None
        return sock

    async def hold_idle() -> None:
        held: list[socket.socket] = []
        while loop.time() < stop:
            alive = []
            for sock in held:
                try:
                    gone = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    sock.close()
                    stats["idle closed by the exporter"] += 1
                else:
                    alive.append(sock)
            held = alive
            while len(held) < idle and loop.time() < stop:
                sock = await connect()
                if sock is not None:
                    held.append(sock)
            await asyncio.sleep(1.0)
        for sock in held:
            sock.close()

    async def slowloris() -> None:
        while loop.time() < stop:
            sock = await connect()
            if sock is None:
                await asyncio.sleep(0.5)
                continue
            try:
                await loop.sock_sendall(sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                while loop.time() < stop:
                    await loop.sock_sendall(sock, b"X-Slow: 1\r\n")
                    await asyncio.sleep(1.0)
            except OSError:
                stats["slowloris cut by the exporter"] += 1
            sock.close()

    async def guesses(session: aiohttp.ClientSession, worker: int) -> None:
        n = 0
        while loop.time() < stop:
            n += 1
            try:
                async with session.get(f"{url}/metrics",
                                       headers=auth(f"guess-{worker}-{n}")) as response:
                    stats[f"wrong password → {response.status}"] += 1
            except (aiohttp.ClientError, TimeoutError):
                stats["wrong password → connection dropped"] += 1
                await asyncio.sleep(0.05)

    async def reload_flood(session: aiohttp.ClientSession) -> None:
        while loop.time() < stop:
            try:
                async with session.post(f"{url}/-/reload", headers=auth()) as response:
                    stats[f"reload → {response.status}"] += 1
            except (aiohttp.ClientError, TimeoutError):
                stats["reload → connection dropped"] += 1
                await asyncio.sleep(0.05)

    async def malformed() -> None:
        while loop.time() < stop:
            sock = await connect()
            if sock is None:
                stats["malformed → not connected"] += 1
                await asyncio.sleep(0.05)
                continue
            try:
                await loop.sock_sendall(sock, MALFORMED)
                answer = await asyncio.wait_for(loop.sock_recv(sock, 4096), 10)
                stats[f"malformed → {answer[9:12].decode(errors='replace') or 'closed'}"] += 1
            except (OSError, TimeoutError):
                stats["malformed → connection dropped"] += 1
            finally:
                sock.close()

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True),
                                     timeout=timeout) as session:
        print("ATTACKING", flush=True)
        await asyncio.gather(hold_idle(), *(slowloris() for _ in range(plan["slowloris"])),
                             *(guesses(session, w) for w in range(wrong)),
                             *(reload_flood(session) for _ in range(reloads)),
                             *(malformed() for _ in range(plan["malformed"])))
    await asyncio.to_thread(Path(out).write_text, json.dumps(stats))


# -- the parent -------------------------------------------------------------------------------

async def scrape_for(url: str, seconds: float) -> tuple[list[float], int]:
    """Authenticated scrapes every 0.25 s on one kept-alive connection: latencies, failures."""
    latencies: list[float] = []
    failures = 0
    deadline = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < deadline:
            start = time.perf_counter()
            try:
                async with session.get(f"{url}/metrics", headers=auth()) as response:
                    await response.read()
                    ok = response.status == 200
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            if ok:
                latencies.append(time.perf_counter() - start)
            else:
                failures += 1
            await asyncio.sleep(max(0.0, SCRAPE_EVERY - (time.perf_counter() - start)))
    return latencies, failures


def phase_row(name: str, scrapes: tuple[list[float], int], probes: list[dict[str, Any]],
              truth: dict[str, dict[str, Any]], log_rate: float) -> list[str]:
    """One table row: scrape latency, TTFT error of the probes finished in the phase, log
    bytes per second."""
    latencies, failed = scrapes
    errors = []
    for probe in probes:
        record = truth.get(probe["id"] or "")
        if probe["result"] == "success" and record and record["writes"]:
            errors.append(probe["ttft"] - (record["writes"][0] - record["arrived"]))
    return [name, str(len(latencies)), ms(pct(latencies, 50), 1), ms(pct(latencies, 95), 1),
            ms(max(latencies, default=None), 1), str(failed), str(len(probes)),
            str(sum(p["result"] != "success" for p in probes)),
            ms(pct(errors, 50)), ms(pct(errors, 95)), ms(max(errors, default=None)),
            f"{log_rate:,.0f}"]


def port_attack(args: argparse.Namespace) -> dict[str, int]:
    """The attack of the "attack" phases."""
    return {"idle": args.idle, "slowloris": 50, "wrong": args.wrong, "reloads": args.reloads,
            "malformed": 0}


def malformed_attack(args: argparse.Namespace) -> dict[str, int]:
    """The attack of the malformed-flood phase."""
    return {"idle": 0, "slowloris": 0, "wrong": 0, "reloads": 0, "malformed": args.malformed}


async def attack_process(url: str, args: argparse.Namespace, plan: dict[str, int], folder: Path,
                         out: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """Start the attacker on `url` and wait until it attacks."""
    attacker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.hostile", "--attack", url, str(args.duration + 1),
        json.dumps(plan), str(folder / out), stdout=asyncio.subprocess.PIPE, cwd=ROOT, env=env)
    assert attacker.stdout is not None
    await attacker.stdout.readline()
    return attacker


class Phases:
    """When each phase began and ended (monotonic), and the daemon's log size then."""

    def __init__(self, log: Path) -> None:
        self._log = log
        self.marks: dict[str, tuple[float, int]] = {}

    def mark(self, name: str) -> None:
        self.marks[name] = (time.monotonic(), self._log.stat().st_size)

    def span(self, start: str, end: str) -> tuple[float, float]:
        return self.marks[start][0], self.marks[end][0]

    def log_rate(self, start: str, end: str) -> float:
        (t0, b0), (t1, b1) = self.marks[start], self.marks[end]
        return (b1 - b0) / (t1 - t0)


async def hostile(args: argparse.Namespace) -> None:
    """Truth server, daemon and attacker; quiet phase then attacks; print the table."""
    more_descriptors()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with truth_server(ttft=0.2, tpot=0.02, tokens=20) as truth:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            config, web = write_files(folder, truth.base_url, args.bulk)
            log = folder / "daemon.log"
            daemon = await start_daemon_child(config, web, port, folder, env)
            attacker = decoy = None
            phases = Phases(log)
            try:
                await daemon_ready(daemon, log)
                load_before = machine_line()
                await asyncio.sleep(args.warm_up)
                phases.mark("quiet")
                quiet = await scrape_for(url, args.duration)
                phases.mark("quiet end")
                decoy_port = free_port()
                decoy = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "benchmarks.hostile", "--decoy", str(decoy_port),
                    str(args.duration + 3), stdout=asyncio.subprocess.PIPE, cwd=ROOT, env=env)
                assert decoy.stdout is not None
                await decoy.stdout.readline()
                attacker = await attack_process(f"http://127.0.0.1:{decoy_port}", args,
                                                port_attack(args), folder, "decoy.json", env)
                phases.mark("decoy")
                elsewhere = await scrape_for(url, args.duration)
                phases.mark("decoy end")
                await asyncio.wait_for(attacker.wait(), 60)
                await stop_process(decoy)
                attacker = await attack_process(url, args, port_attack(args), folder,
                                                "attack.json", env)
                phases.mark("attack")
                attacked = await scrape_for(url, args.duration)
                phases.mark("attack end")
                await asyncio.wait_for(attacker.wait(), 60)
                attacker = await attack_process(url, args, malformed_attack(args), folder,
                                                "malformed.json", env)
                phases.mark("malformed")
                flooded = await scrape_for(url, args.duration)
                phases.mark("malformed end")
                load_after = machine_line()
                await asyncio.wait_for(attacker.wait(), 60)
                attack = json.loads((folder / "attack.json").read_text())
                flood = json.loads((folder / "malformed.json").read_text())
                assert daemon.stdin is not None
                daemon.stdin.close()  # the daemon's cue to stop
                await asyncio.wait_for(daemon.wait(), 60)
                probes = json.loads((folder / "daemon.json").read_text())
                logged = log.read_text(errors="replace")
            finally:
                for child in (attacker, decoy):
                    if child is not None:
                        await stop_process(child)
                await stop_process(daemon)
        records = await truth.records()

    def row(name: str, scrapes: tuple[list[float], int], phase: str) -> list[str]:
        start, end = phases.span(phase, f"{phase} end")
        return phase_row(name, scrapes, [p for p in probes if start <= p["at"] < end], records,
                         phases.log_rate(phase, f"{phase} end"))

    rows = [row("quiet", quiet, "quiet"), row("attack on a decoy", elsewhere, "decoy"),
            row("attack on the port", attacked, "attack"),
            row("malformed-request flood", flooded, "malformed")]
    print(f"### hostile ({load_before}; after: {load_after.split('· ')[-1]})\n")
    print(f"attack: {args.idle} idle connections (reopened when closed), 50 slowloris, "
          f"{args.wrong} concurrent wrong passwords in a loop, {args.reloads} reload loops; "
          f"malformed flood: {args.malformed} clients in a loop; {args.duration:g} s per "
          f"phase; scrapes every {SCRAPE_EVERY} s with the right password on a kept-alive "
          "connection (bcrypt cost 10); daemon log at warn, json\n")
    print(table(["phase", "scrapes", "scrape p50 ms", "p95", "max", "failed", "probes",
                 "probe failures", "TTFT err p50 ms", "p95", "max", "log B/s"], rows))
    print("\nattacker saw: " + ", ".join(f"{k}: {v}" for k, v in sorted(attack.items())))
    sent = sum(flood.values())
    print(f"malformed flood: {sent:,} requests ({sent / args.duration:,.0f}/s); answers: "
          + ", ".join(f"{k.removeprefix('malformed → ')}: {v}" for k, v in sorted(flood.items()))
          + f"; log lines quoting the request's credentials: "
          f"{logged.count(MALFORMED_TOKEN.decode())}, tracebacks: "
          f"{logged.count('Traceback')}")


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--daemon"]:
        _, config, web, listen, out = argv
        asyncio.run(_daemon(config, web, listen, out))
        return
    if argv[:1] == ["--decoy"]:
        asyncio.run(_decoy(int(argv[1]), float(argv[2])))
        return
    if argv[:1] == ["--attack"]:
        _, url, duration, plan, out = argv
        asyncio.run(_attack(url, float(duration), json.loads(plan), out))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--idle", type=int, default=1100)
    parser.add_argument("--wrong", type=int, default=500)
    parser.add_argument("--reloads", type=int, default=20)
    parser.add_argument("--malformed", type=int, default=50,
                        help="clients sending requests that fail to parse, in a loop")
    parser.add_argument("--bulk", type=int, default=200, help="extra series (reload work)")
    parser.add_argument("--warm-up", type=float, default=12.0,
                        help="seconds before the quiet phase (bulk first probes: < 10 s)")
    parser.add_argument("--smoke", action="store_true", help="tiny CI run (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.duration, args.idle, args.wrong, args.reloads, args.bulk = 3.0, 100, 20, 2, 5
        args.malformed = 5
        args.warm_up = 2.0
    asyncio.run(hostile(args))


if __name__ == "__main__":
    main()

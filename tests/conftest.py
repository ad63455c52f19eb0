"""Shared fixtures: scripted event-stream servers on loopback, config factories, free ports."""

from __future__ import annotations

import asyncio
import os
import random
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from exporter.config import Config, parse_config
from exporter.simulator import framing
from exporter.simulator.dialects import openai_chat


def _ephemeral_ports() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


EPHEMERAL = _ephemeral_ports()


def _port_slice() -> range:
    """This process's own ports: below the kernel's ephemeral range (a port from that range can
    be taken by any outgoing connection — a scrape, a probe — between the check and the server's
    bind), and one slice per xdist worker so that two workers never pick the same port."""
    low = max(1024, EPHEMERAL[0] - 20_000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % _SLICES if worker.isdigit() else 0
    width = (EPHEMERAL[0] - low) // _SLICES
    return range(low + index * width, low + (index + 1) * width)


_SLICES = 16
_PORTS = _port_slice()
_next_port = random.randrange(len(_PORTS))  # a fresh start each run: earlier runs' sockets linger


def free_port() -> int:
    """A TCP port nobody listens on right now and that this process has not handed out before.

    Never twice: a caller often picks a port for a server that some later process binds (the
    daemon's embedded simulator), so the port is still free when the next caller asks — a
    random pick once gave the daemon and its simulator the same port."""
    global _next_port
    for _ in range(len(_PORTS)):
        port = _PORTS[_next_port % len(_PORTS)]
        _next_port += 1
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORTS}")


def chat_chunk(content: str | None = None, *, reasoning: str | None = None,
               role: str | None = None, finish: str | None = None, id: str | None = "chatcmpl-1",
               usage: dict | None = None, choices: bool = True) -> bytes:
    """One `data: {...}\\n\\n` chat.completion.chunk event (the simulator's encoder)."""
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    fields = {} if usage is None else {"usage": usage}
    return openai_chat.chat_chunk(openai_chat.chunk_head(id), delta if choices else None, finish,
                                  **fields)


DONE = framing.DONE


@dataclass
class Script:
    """What a scripted server answers: status, headers, then (delay, bytes) steps."""

    steps: Sequence[tuple[float, bytes]] = ()
    status: int = 200
    headers: dict[str, str] = field(
        default_factory=lambda: {"Content-Type": "text/event-stream"})
    delay_headers: float = 0.0
    reset_after: bool = False  # drop the connection after the steps instead of ending cleanly


@dataclass
class ScriptedServer:
    """A loopback HTTP server playing `Script`s; records the requests it got."""

    url: str
    requests: list[dict[str, Any]]
    scripts: list[Script]


def ok_stream(tokens: Sequence[str], *, usage: dict | None = None, gap: float = 0.0,
              finish: str = "stop", done: bool = True) -> Script:
    """A well-formed chat stream: role chunk, one chunk per item, finish, usage, [DONE]."""
    steps: list[tuple[float, bytes]] = [(0.0, chat_chunk(role="assistant", content=""))]
    steps += [(gap, chat_chunk(t)) for t in tokens]
    steps.append((0.0, chat_chunk(finish=finish)))
    if usage is not None:
        steps.append((0.0, chat_chunk(usage=usage, choices=False)))
    if done:
        steps.append((0.0, DONE))
    return Script(steps)


@pytest.fixture
async def scripted_server() -> AsyncIterator[Callable[..., Any]]:
    """Factory: `await scripted_server(script, ...)` → ScriptedServer; scripts play in order."""
    runners: list[web.AppRunner] = []

    async def start(*scripts: Script) -> ScriptedServer:
        requests: list[dict[str, Any]] = []
        queue = list(scripts)

        async def handler(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            requests.append({"path": request.path, "headers": dict(request.headers),
                             "json": orjson.loads(body) if body else None,
                             "query": dict(request.query)})
            script = queue.pop(0) if len(queue) > 1 else queue[0]
            if script.delay_headers:
                await asyncio.sleep(script.delay_headers)
            response = web.StreamResponse(status=script.status, headers=script.headers)
            await response.prepare(request)
            for delay, data in script.steps:
                if delay:
                    await asyncio.sleep(delay)
                await response.write(data)
            if script.reset_after:
                assert request.transport is not None
                request.transport.abort()
                return response
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        return ScriptedServer(f"http://127.0.0.1:{port}/v1", requests, list(scripts))

    yield start
    for runner in runners:
        await runner.cleanup()


async def probe_once(server: ScriptedServer, **overrides: Any) -> tuple[Any, Any]:
    """Probe the first series of `make_config(server.url, **overrides)` once and record it;
    returns (result, registry)."""
    from prometheus_client import CollectorRegistry

    from exporter.exposition.metrics import ExporterMetrics
    from exporter.probe.prober import Prober

    config = make_config(server.url, **overrides)
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    async with Prober() as prober:
        result = await prober.probe(config.series[0])
    metrics.record(result)
    return result, registry


def make_config(base_url: str = "http://127.0.0.1:1/v1", *, models: Sequence[str] = ("m",),
                probe: dict | None = None, target: dict | None = None,
                global_: dict | None = None, env: dict | None = None) -> Config:
    """A one-target config around `base_url`, with overrides."""
    data: dict[str, Any] = {
        "global": {"timeout": "5s", "interval": "1s", "allow_short_intervals": True,
                   **(global_ or {})},
        "probes": {"short": {"prompt": "Say hello.", "max_tokens": 64, **(probe or {})}},
        "targets": [{"name": "t", "base_url": base_url, "models": list(models),
                     **(target or {})}],
    }
    return parse_config(data, env=env or {})


@pytest.fixture(scope="session")
def prometheus_with_daemon(tmp_path_factory):
    """A real Prometheus (rules loaded) scraping the daemon, which probes `sim-good` and
    `sim-bad` (fails every request) on its embedded simulator; yields the Prometheus handle."""
    from tests.e2e_support import ROOT, shipped_config, start_daemon, start_prometheus, wait_for

    tmp = tmp_path_factory.mktemp("prometheus-with-daemon")
    fast = {"ttft": "50ms", "tpot": "5ms", "output_tokens": 16, "jitter": 0.1}
    # sim-good bills as a gateway does (usage.cost) at the price the config types for it.
    billed = {**fast, "price": {"input": 0.5, "output": 1.5}}
    config, _ = shipped_config(tmp, interval="1s", models={
        "sim-good": billed, "sim-bad": {**fast, "error_rate": 1.0, "error_status": 503}})
    daemon = start_daemon(config, tmp)
    rules = sorted((ROOT / "deploy" / "prometheus").glob("*.yml"))
    prometheus = start_prometheus(tmp, [daemon.url.removeprefix("http://")], rule_files=rules)
    prometheus.rate_interval = "30s"
    try:
        wait_for(prometheus.targets_up, 30, "Prometheus to scrape the exporter")
        wait_for(lambda: prometheus.query(
            'sum by (model) (rate(llm_probe_requests_total[30s])) > 0'), 60,
            "request rates in Prometheus")
        yield prometheus
    finally:
        prometheus.stop()
        daemon.stop()

"""A real app on a real socket for the port's attack tests: the daemon's pieces, in process
(the HTTP side on its own thread and loop, as in the daemon)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from exporter.config import Config
from exporter.exposition.metrics import ExporterMetrics
from exporter.probe.prober import Prober
from exporter.serve.listener import ServerLimits
from exporter.serve.results import ResultStore
from exporter.serve.scheduler import Scheduler
from exporter.serve.server import ServerState, start_server
from exporter.serve.webconfig import LiveWebConfig


@dataclass
class Served:
    """The running app: its state, URL and registry."""

    state: ServerState
    url: str
    port: int
    registry: CollectorRegistry

    def sample(self, name: str, **labels: str) -> float | None:
        """One sample of the daemon's registry."""
        return self.registry.get_sample_value(name, labels)


@contextlib.asynccontextmanager
async def serve(config: Config, *, web_config: LiveWebConfig | None = None,
                limits: ServerLimits | None = None, schedule: bool = True,
                **state_fields: Any) -> AsyncIterator[Served]:
    """Start scheduler and server like the daemon does (on a free port); stop them after."""
    registry = CollectorRegistry()
    metrics = ExporterMetrics(registry, config)
    store = ResultStore()
    store.set_series(s.key for s in config.series)
    prober = Prober()
    await prober.start()
    scheduler = Scheduler(prober, metrics, store, max_concurrency=config.global_.max_concurrency)

    async def reload() -> None:
        pass

    state = ServerState(registry, metrics, store, scheduler, config, reload, ready=True,
                        **state_fields)
    server = await start_server(state, "127.0.0.1", 0, web_config=web_config, limits=limits)
    scheme = "https" if web_config is not None and web_config.tls else "http"
    if schedule:
        scheduler.apply(config)
    try:
        yield Served(state, f"{scheme}://127.0.0.1:{server.port}", server.port, registry)
    finally:
        await scheduler.stop(grace=1)
        await server.cleanup()
        await prober.close()


def basic(user: str, password: str) -> dict[str, str]:
    """An Authorization header."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def timed_get(session: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, float]:
    """GET on a fresh connection; (status, seconds until the whole body was read)."""
    start = time.perf_counter()
    async with session.get(url, **kw) as response:
        await response.read()
        return response.status, time.perf_counter() - start


@contextlib.asynccontextmanager
async def idle_connections(port: int, count: int) -> AsyncIterator[list[socket.socket]]:
    """`count` TCP connections that never send a byte; all closed on exit."""
    loop = asyncio.get_running_loop()
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sockets.append(sock)
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                await loop.sock_connect(sock, ("127.0.0.1", port))
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server has closed this connection (non-blocking peek)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True

"""Run the simulator app on a real socket: `start_simulator`, `Simulator.close`, `serve_forever`."""

from __future__ import annotations

import asyncio
import ipaddress
import signal
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import structlog
from aiohttp import web

from ..config import SimulatedModel, SimulatorConfig
from ..config.address import parse_listen_address
from ..config.simkey import listens_beyond_loopback
from .app import create_app
from .dialects import AwsKeys
from .state import SIM_RECORDS, SimRecord, set_models

# How long `close()` lets in-flight answers finish before cancelling them: a simulator that
# is told to stop should stop, even with a 30 s stall in progress.
SHUTDOWN_GRACE = 0.2


def _url_host(host: str) -> str:
    """The host a local client should dial: loopback for wildcard binds, brackets for IPv6."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass  # a host name
    return host


class Simulator:
    """A running simulator: `origin` is `http://host:port`, `url` the OpenAI base (`…/v1`)."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self._runner = runner
        self.host = host
        self.port = port
        self.origin = f"http://{_url_host(host)}:{port}"
        self.url = self.origin + "/v1"

    @property
    def app(self) -> web.Application:
        """The aiohttp application being served."""
        return self._runner.app

    @property
    def records(self) -> deque[SimRecord]:
        """What the server did for recent requests (`app[SIM_RECORDS]`)."""
        return self.app[SIM_RECORDS]

    def set_models(self, models: Mapping[str, SimulatedModel]) -> None:
        """Serve these model profiles from the next request on (a reload of `models`)."""
        set_models(self.app, models)

    async def close(self) -> None:
        """Stop listening, cut in-flight answers after a short grace period, free the port."""
        await self._runner.cleanup()

    async def __aenter__(self) -> Simulator:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Simulator(url={self.url!r})"


async def start_simulator(config: SimulatorConfig, *, api_key: str | None = None,
                          aws_keys: AwsKeys | None = None, seed: int | None = None,
                          logger: Any = None) -> Simulator:
    """Bind `config.listen` (port 0 picks a free port) and serve the configured models."""
    host, port = parse_listen_address(config.listen)
    app = create_app(config.models, api_key=api_key, aws_keys=aws_keys, seed=seed,
                     logger=logger)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1] if runner.addresses else port
    return Simulator(runner, host, bound)


async def serve_forever(config: SimulatorConfig, *, api_key: str | None = None,
                        seed: int | None = None, logger: Any = None,
                        reload: Callable[[], SimulatorConfig] | None = None) -> None:
    """Run the simulator until cancelled (the `simulate` command), then close it. With
    `reload`, SIGHUP serves the models it returns (an error keeps the running ones)."""
    log = logger or structlog.get_logger("exporter.simulator")
    simulator = await start_simulator(config, api_key=api_key, seed=seed, logger=log)
    log.info("simulator listening", url=simulator.url, models=list(config.models))
    if not api_key and listens_beyond_loopback(config.listen):
        log.warning("SIMULATOR OPEN TO THE NETWORK WITHOUT A KEY: anyone who reaches "
                    f"{config.listen} can drive it and change its models at run time; set "
                    "simulator.api_key or listen on 127.0.0.1", listen=config.listen)
    loop = asyncio.get_running_loop()
    reloading: set[asyncio.Task[None]] = set()

    async def _reload(read: Callable[[], SimulatorConfig]) -> None:
        try:
            fresh = await asyncio.to_thread(read)
        except Exception as exc:  # a ConfigError, or the file went away: keep serving
            log.error("simulator reload failed", error=str(exc))
            return
        simulator.set_models(fresh.models)
        log.info("simulator reloaded", models=list(fresh.models))
        if fresh.listen != config.listen or fresh.api_key != config.api_key:
            log.warning("simulator reload: listen and api_key apply at the next start")

    def _on_hangup() -> None:
        if reload is not None:
            task = loop.create_task(_reload(reload))
            reloading.add(task)
            task.add_done_callback(reloading.discard)

    if reload is not None:
        loop.add_signal_handler(signal.SIGHUP, _on_hangup)
    try:
        await asyncio.Event().wait()
    finally:
        if reload is not None:
            loop.remove_signal_handler(signal.SIGHUP)
        await simulator.close()
        log.info("simulator stopped")

"""`serve`: wire config → scheduler → prober → metrics → HTTP, and handle reload and shutdown."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from exporter import tokens
from exporter.config import Config, ConfigError, load_config, parse_listen_address
from exporter.log import REDACTOR, get_logger
from exporter.metrics import ExporterMetrics
from exporter.prober import Prober
from exporter.scheduler import Scheduler
from exporter.server import HTTPServer, ServerState, start_server
from exporter.simulator import Simulator, start_simulator
from exporter.store import ResultStore
from exporter.webconfig import LiveWebConfig

LOOP_LAG_PERIOD = 0.25
SWITCH_INTERVAL = 0.0005
AUTO_RELOAD_PERIOD = 2.0
GC_THRESHOLDS = (10_000, 20, 100)


class Daemon:
    """The long-running exporter."""

    def __init__(self, config_path: Path, listen: str, *, shutdown_grace: float = 10.0,
                 shard: str | None = None, web_config: Path | None = None,
                 probe_endpoint: bool = True, auto_reload: bool = False,
                 logger: Any = None) -> None:
        self.config_path = config_path
        self.shard = shard
        self.web_config = web_config
        self.probe_endpoint = probe_endpoint
        self.auto_reload = auto_reload
        self._watch_task: asyncio.Task[None] | None = None
        self.listen = listen
        self.shutdown_grace = shutdown_grace
        self.log = logger or get_logger()
        self.registry = CollectorRegistry()
        self.metrics = ExporterMetrics(self.registry)
        self.store = ResultStore()
        self.prober: Prober | None = None
        self.scheduler: Scheduler | None = None
        self.simulator: Simulator | None = None
        self.state: ServerState | None = None
        self._runner: HTTPServer | None = None
        self._stop = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._lag_task: asyncio.Task[None] | None = None

    async def run(self, config: Config) -> None:
        """Serve until SIGTERM/SIGINT (or `stop()`), then shut down gracefully."""
        await self.start(config)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(self.reload()))
        try:
            await self._stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            await self.shutdown()

    def stop(self) -> None:
        """Ask the daemon to shut down."""
        self._stop.set()

    async def start(self, config: Config) -> None:
        """Start the simulator (if configured), the HTTP server and the scheduler."""
        # Rendering runs in worker threads; a short GIL switch interval lets the event loop
        # take the GIL back within 0.5 ms (default 5 ms) to stamp arriving bytes.
        sys.setswitchinterval(SWITCH_INTERVAL)
        REDACTOR.update(config.secrets())
        # Load the token vocabulary now, off the loop, not inside the first probe.
        await asyncio.to_thread(tokens.warm_up)
        if config.simulator is not None:
            self.simulator = await start_simulator(config.simulator,
                                                   api_key=config.simulator.api_key)
            self.log.info("simulator started", url=self.simulator.url)
        self.prober = Prober(max_output_bytes=config.global_.max_output_bytes)
        await self.prober.start()
        self.scheduler = Scheduler(self.prober, self.metrics, self.store,
                                   max_concurrency=config.global_.max_concurrency)
        self.state = ServerState(self.registry, self.metrics, self.store, self.scheduler,
                                 None, self.reload, started_at=time.time(),
                                 probe_endpoint=self.probe_endpoint, shard=self.shard)
        web_config = LiveWebConfig(self.web_config) if self.web_config is not None else None
        host, port = parse_listen_address(self.listen)
        self._runner = await start_server(self.state, host, port, web_config=web_config)
        self.log.info("listening", address=self.listen)
        self._apply(config)
        self.metrics.reload_status(True, time.time())
        self.state.ready = True
        self._lag_task = asyncio.create_task(self._watch_loop_lag())
        if self.auto_reload:
            self._watch_task = asyncio.create_task(self._watch_files())
        self.log.info("probing", series=len(config.series), targets=len(config.targets))

    def _apply(self, config: Config) -> None:
        assert self.state is not None and self.scheduler is not None
        REDACTOR.update(config.secrets())
        self.metrics.apply(config)
        self.store.set_series(s.key for s in config.series)
        self.scheduler.apply(config)
        self.state.config = config
        # The metric objects of thousands of series live as long as the config: keep them out
        # of full garbage collections, which otherwise pause the loop for hundreds of ms.
        gc.collect()
        gc.freeze()
        # Fewer, not longer, collections: each full one pauses the loop for its whole scan.
        gc.set_threshold(*GC_THRESHOLDS)

    async def reload(self) -> None:
        """Re-read the config file; keep the running config if the new one is invalid."""
        assert self.state is not None
        async with self._reload_lock:
            try:
                config = await asyncio.to_thread(load_config, self.config_path,
                                                 shard=self.shard)
                old = self.state.config
                if old is not None and old.simulator != config.simulator:
                    self.log.warning("simulator settings changed; restart to apply them")
                self._apply(config)
            except ConfigError as exc:
                self.state.last_reload_error = str(exc)
                self.metrics.reload_status(False)
                self.log.error("config reload failed; keeping the running config",
                               error=str(exc))
                return
            self.state.last_reload_error = ""
            self.metrics.reload_status(True, time.time())
            self.log.info("config reloaded", series=len(config.series))

    def _watched_files(self) -> list[Path]:
        """The config file and the key files it names."""
        files = [self.config_path]
        config = self.state.config if self.state else None
        if config is not None:
            base = self.config_path.parent
            for target in config.raw.get("targets", []):
                key_file = target.get("api_key_file") if isinstance(target, dict) else None
                if key_file:
                    files.append(Path(key_file) if Path(key_file).is_absolute()
                                 else base / key_file)
        return files

    async def _watch_files(self) -> None:
        """Poll the config and key files; reload when one changed (`--config.auto-reload`)."""
        def stamps() -> dict[Path, tuple[float, int] | None]:
            out: dict[Path, tuple[float, int] | None] = {}
            for path in self._watched_files():
                try:
                    stat = path.stat()
                    out[path] = (stat.st_mtime, stat.st_size)
                except OSError:
                    out[path] = None
            return out

        seen = await asyncio.to_thread(stamps)
        while True:
            await asyncio.sleep(AUTO_RELOAD_PERIOD)
            current = await asyncio.to_thread(stamps)
            if current != seen:
                self.log.info("config changed on disk; reloading")
                await self.reload()
                seen = await asyncio.to_thread(stamps)

    async def _watch_loop_lag(self) -> None:
        """Measure how late the loop wakes a timer: timings are skewed by the same amount."""
        loop = asyncio.get_running_loop()
        recent: deque[float] = deque(maxlen=int(60 / LOOP_LAG_PERIOD))
        while True:
            planned = loop.time() + LOOP_LAG_PERIOD
            await asyncio.sleep(LOOP_LAG_PERIOD)
            lag = max(0.0, loop.time() - planned)
            self.metrics.event_loop_lag.observe(lag)
            recent.append(lag)
            if self.state is not None:
                self.state.loop_lag_recent = max(recent)

    async def shutdown(self) -> None:
        """Stop scheduling, let in-flight probes finish (bounded), close everything."""
        self.log.info("shutting down")
        if self.state is not None:
            self.state.ready = False
        for task in (self._lag_task, self._watch_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.scheduler is not None:
            await self.scheduler.stop(self.shutdown_grace)
        if self._runner is not None:
            await self._runner.cleanup()
        if self.prober is not None:
            await self.prober.close()
        if self.simulator is not None:
            await self.simulator.close()
        self.log.info("stopped")

"""`serve`: wire config → scheduler → prober → metrics → HTTP; reloads, signals, bounded shutdown.

A reload is cheap when nothing changed (the config file and its key files are compared by
digest), never runs twice at once, parses at most once per RELOAD_MIN_INTERVAL (requests in
between share the next reload) and in a worker thread, and never raises: any failure keeps the
running config, sets `llm_probe_config_last_reload_successful 0`, shows on the status page and
logs one line. A stop request (SIGTERM, SIGINT) bounds the whole shutdown by `shutdown_grace`.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from exporter.config import (
    Config,
    ConfigError,
    expand,
    load_config,
    reuse_unchanged,
    sources_digest,
)
from exporter.config.address import parse_listen_address
from exporter.exposition.metrics import ExporterMetrics
from exporter.files import FileSignature, signature
from exporter.log import REDACTOR, get_logger
from exporter.probe.prober import Prober
from exporter.protocols import images
from exporter.serve.discovery import Discovery
from exporter.serve.results import ResultStore
from exporter.serve.scheduler import Scheduler
from exporter.serve.server import HTTPServer, ServerState, start_server
from exporter.serve.signals import ProcessSignals
from exporter.serve.statedir import StateKeeper, StateUsage, keep
from exporter.serve.webconfig import LiveWebConfig
from exporter.simulator import SimulatorThread, start_simulator_thread
from exporter.simulator.thread import SWITCH_INTERVAL

LOOP_LAG_PERIOD = 0.25
AUTO_RELOAD_PERIOD = 2.0
RELOAD_MIN_INTERVAL = 1.0  # seconds between the starts of two reloads that parsed a file
CLOSE_RESERVE = 1.0  # seconds of the grace kept for closing the server and sessions
GC_THRESHOLDS = (10_000, 20, 100)

FileSignatures = dict[Path, FileSignature | None]


class StartError(Exception):
    """The daemon cannot start (its port or the simulator's is taken, or not an address)."""


def _cannot_listen(what: str, address: str, exc: OSError) -> StartError:
    # asyncio words it "error while attempting to bind on address (...): address in use".
    reason = exc.strerror.rpartition(": ")[2] if exc.strerror else str(exc)
    return StartError(f"cannot listen on {address} ({what}): {reason}")


class Daemon:
    """The long-running exporter."""

    def __init__(self, config_path: Path, listen: str, *, shutdown_grace: float = 10.0,
                 shard: str | None = None, web_config: Path | None = None,
                 probe_endpoint: bool = True, auto_reload: bool = False,
                 signals: ProcessSignals | None = None, logger: Any = None) -> None:
        self.config_path = config_path
        self.shard = shard
        self.web_config = web_config
        self.probe_endpoint = probe_endpoint
        self.auto_reload = auto_reload
        self.signals = signals
        self.listen = listen
        self.shutdown_grace = shutdown_grace
        self.log = logger or get_logger()
        self.registry = CollectorRegistry()
        self.metrics = ExporterMetrics(self.registry)
        self.store = ResultStore()
        self.prober: Prober | None = None
        self.scheduler: Scheduler | None = None
        self.discovery: Discovery | None = None
        self.simulator: SimulatorThread | None = None
        self.state: ServerState | None = None
        self._runner: HTTPServer | None = None
        self._stop = asyncio.Event()
        self._stop_at: float | None = None
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._next_reload: asyncio.Future[None] | None = None  # the round new requests join
        self._reload_worker: asyncio.Task[None] | None = None
        self._last_reload_at = -RELOAD_MIN_INTERVAL
        self._reload_after_start = False
        # Process-wide settings (GIL switch interval, garbage collector) belong to the process
        # that runs the daemon: `serve()` sets this; a daemon started inside a test leaves them.
        self.owns_process = False

    @property
    def deadline(self) -> float | None:
        """Monotonic time by which the process must be gone, once a stop was requested."""
        return None if self._stop_at is None else self._stop_at + self.shutdown_grace

    async def run(self, config: Config) -> None:
        """Serve until SIGTERM/SIGINT (or `stop()`), then shut down within the grace."""
        if self.signals is not None:
            self.signals.attach(asyncio.get_running_loop(), self.stop, self.request_reload)
        try:
            if not self._stop.is_set():
                await self.start(config)
                await self._stop.wait()
        finally:
            await self.shutdown()

    def stop(self) -> None:
        """Ask the daemon to shut down; the grace counts from the first request."""
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        self._stop.set()

    async def start(self, config: Config) -> None:
        """Listen, start the simulator (if configured), the prober and the scheduler.

        The port is bound first: if it is taken, nothing else was opened (`shutdown()` closes
        whatever a failed start left).
        """
        if self.owns_process:
            # Rendering runs in worker threads; a short GIL switch interval lets the event
            # loop take the GIL back within 0.5 ms (default 5 ms) to stamp arriving bytes.
            sys.setswitchinterval(SWITCH_INTERVAL)
        REDACTOR.update(config.secrets())
        # The token vocabulary and probe images are built now, off the loop, not in a probe.
        await asyncio.to_thread(_warm_up, config)
        self.prober = Prober(max_output_bytes=config.global_.max_output_bytes)
        self.scheduler = Scheduler(self.prober, self.metrics, self.store,
                                   max_concurrency=config.global_.max_concurrency)
        self.state = ServerState(self.registry, self.metrics, self.store, self.scheduler,
                                 None, self.reload, started_at=time.time(),
                                 probe_endpoint=self.probe_endpoint, shard=self.shard,
                                 adaptations=self.prober.adaptations.describe)
        # Read off the loop: files (and a TLS key) are read and checked, however slow the disk.
        web_config = (await asyncio.to_thread(LiveWebConfig, self.web_config)
                      if self.web_config is not None else None)
        host, port = parse_listen_address(self.listen)
        try:
            self._runner = await start_server(self.state, host, port, web_config=web_config)
        except OSError as exc:
            raise _cannot_listen("--web.listen-address", self.listen, exc) from None
        self.log.info("listening", address=self.listen)
        if config.simulator is not None:
            try:
                # Its own thread and loop: no client of the simulator can delay a probe's stamps.
                self.simulator = await start_simulator_thread(config.simulator,
                                                              api_key=config.simulator.api_key)
            except OSError as exc:
                raise _cannot_listen("simulator.listen", config.simulator.listen, exc) from None
            self.log.info("simulator started", url=self.simulator.url)
        await self.prober.start()
        self.discovery = Discovery(self.prober, self.metrics.discoveries, self._rediscover,
                                   logger=self.log)
        self.state.discovery = self.discovery
        self._apply(config)
        if self.owns_process:
            # The objects of thousands of series live as long as the config: keep them out of
            # full garbage collections, which otherwise pause the loop for hundreds of ms.
            # Once, here: a reload must not pause the loop for a collection.
            gc.collect()
            gc.freeze()
            # Fewer, not longer, collections: each full one pauses the loop for its whole scan.
            gc.set_threshold(*GC_THRESHOLDS)
        self.metrics.reload_status(True, time.time())
        self.state.ready = True
        self._tasks.append(asyncio.create_task(self._watch_loop_lag()))
        self._tasks.append(asyncio.create_task(keep(
            StateKeeper(logger=self.log), lambda: self.state.config if self.state else None,
            self._publish_state_usage)))
        if self.auto_reload:
            self._tasks.append(asyncio.create_task(self._watch_files()))
        self.log.info("probing", series=len(config.series), targets=len(config.targets))
        if self._reload_after_start:  # a SIGHUP came while starting: the file may be newer
            self._join_next_reload()

    def _apply(self, config: Config) -> None:
        assert self.state is not None and self.scheduler is not None
        REDACTOR.update(config.secrets())
        if self.discovery is not None:
            self.discovery.apply(config)
            self.discovery.set_models_in_use(config)
        self.metrics.apply(config)
        self.store.set_series(s.key for s in config.series)
        if self.prober is not None:  # what the old config's series left behind is forgotten
            self.prober.retain(config.series)
        self.scheduler.apply(config)
        self.state.config = config

    def _publish_state_usage(self, usage: StateUsage | None) -> None:
        """The latest sweep of the state directory, on the gauge and the pages."""
        self.metrics.set_state_bytes(usage.bytes if usage is not None else 0)
        if self.state is not None:
            self.state.state_usage = usage

    async def _rediscover(self) -> None:
        """A discovering target's models changed: rebuild the series as a reload does (in a
        worker thread), then apply them. A failure keeps the running series."""
        if self.state is None or self.state.config is None or self.discovery is None:
            return
        running = self.state.config
        catalogs = self.discovery.catalogs_for(running)
        try:
            config = await asyncio.to_thread(
                lambda: reuse_unchanged(expand(running, catalogs), running))
        except ConfigError as exc:
            self.log.error("discovered models not applied", error=str(exc))
            return
        if self.state.config is running and not self._stopping:  # no reload came meanwhile
            self._apply(config)
            self.log.info("series updated from discovery", series=len(config.series))

    # -- reload ---------------------------------------------------------------------------

    def request_reload(self) -> None:
        """Reload soon (SIGHUP), sharing a reload already asked for; never raises."""
        if self._stopping:
            self.log.info("reload ignored while shutting down")
        elif self.state is not None and self.state.ready:
            self._join_next_reload()
        else:
            self._reload_after_start = True

    async def reload(self) -> None:
        """Re-read the config (`POST /-/reload`); returns when a reload that started after this
        call has finished. The outcome is in `state.last_reload_error` and the reload metric."""
        if self._stopping:
            return
        if self.state is None or not self.state.ready:  # still starting: reload right after
            self._reload_after_start = True
            return
        await asyncio.shield(self._join_next_reload())

    def _join_next_reload(self) -> asyncio.Future[None]:
        if self._next_reload is None:
            self._next_reload = asyncio.get_running_loop().create_future()
        if self._reload_worker is None or self._reload_worker.done():
            self._reload_worker = asyncio.create_task(self._reload_rounds())
        return self._next_reload

    async def _reload_rounds(self) -> None:
        """Run reloads one at a time while asked for; one that parses a file waits until
        RELOAD_MIN_INTERVAL after the last one that did."""
        loop = asyncio.get_running_loop()
        while (current := self._next_reload) is not None and not self._stopping:
            try:
                # Requests keep joining `current` while it waits: it reads the files after them.
                wait = self._last_reload_at + RELOAD_MIN_INTERVAL - loop.time()
                if wait > 0 and await asyncio.to_thread(self._files_changed):
                    await asyncio.sleep(wait)
                self._next_reload = None
                started = loop.time()
                if await self._reload_once():
                    self._last_reload_at = started
            finally:
                if self._next_reload is current:
                    self._next_reload = None
                if not current.done():
                    current.set_result(None)

    def _reload_simulator(self, running: Config, config: Config) -> None:
        """Apply changed simulated models at once; other simulator settings need a restart."""
        old, new = running.simulator, config.simulator
        if (self.simulator is not None and old is not None and new is not None
                and old.model_copy(update={"models": {}}) == new.model_copy(update={"models": {}})):
            self.simulator.set_models(new.models)
            self.log.info("simulator models reloaded", models=list(new.models))
        else:
            self.log.warning("simulator settings changed; restart to apply them")

    async def _reload_once(self) -> bool:
        """One reload; any failure keeps the running config and is reported, never raised.
        True if it parsed a file (the files had changed)."""
        assert self.state is not None
        running = self.state.config
        try:
            config = await asyncio.to_thread(self._read_if_changed, running)
            if config is not None:
                if running is not None and running.simulator != config.simulator:
                    self._reload_simulator(running, config)
                self._apply(config)
                if self.owns_process:
                    # Like after start: the new config's objects live until the next reload,
                    # so keep them out of full collections (each would scan them all, ~150 ms
                    # at 10k series, with nothing to free). O(1); no collection runs here.
                    gc.freeze()
        except Exception as exc:
            # A ConfigError names every problem; anything else is a bug, reported by its type
            # only: its text could hold the bytes of a key file.
            error = (str(exc) if isinstance(exc, ConfigError)
                     else f"unexpected {type(exc).__name__} (a bug; please report it)")
            self.state.last_reload_error = error
            self.metrics.reload_status(False)
            self.log.error("config reload failed; keeping the running config", error=error)
            return True
        self.state.last_reload_error = ""
        self.metrics.reload_status(True, time.time())
        if config is None:
            self.log.info("config unchanged; nothing to reload")
            return False
        self.log.info("config reloaded", series=len(config.series))
        return True

    def _files_changed(self) -> bool:
        """Whether the config file or a key file of the running config changed (worker thread)."""
        running = self.state.config if self.state is not None else None
        return running is None or not running.digest or \
            sources_digest(self.config_path, running.files) != running.digest

    def _read_if_changed(self, running: Config | None) -> Config | None:
        """The new config, or None when the files it comes from are unchanged (worker thread)."""
        if not self._files_changed():
            return None
        config = load_config(self.config_path, shard=self.shard)
        if self.discovery is not None and config.discovering:
            config = expand(config, self.discovery.catalogs_for(config))
        config = reuse_unchanged(config, running)
        _warm_up(config)
        return config

    def _signatures(self) -> FileSignatures:
        """The signatures of the config file and its key files (worker thread)."""
        config = self.state.config if self.state is not None else None
        return {path: signature(path)
                for path in (self.config_path, *(config.files if config is not None else ()))}

    async def _watch_files(self) -> None:
        """Poll the config and key files; reload when one changed (`--config.auto-reload`).

        Survives anything: an error in one round is logged and the next round runs.
        """
        seen: FileSignatures | None = None
        while True:
            try:
                current = await asyncio.to_thread(self._signatures)
                if seen is not None and current != seen:
                    self.log.info("config changed on disk; reloading")
                    await self.reload()
                seen = current
            except Exception as exc:
                self.log.error("config watcher failed; still watching",
                               error=type(exc).__name__)
            await asyncio.sleep(AUTO_RELOAD_PERIOD)

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

    # -- shutdown -------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Stop scheduling, let in-flight probes finish, close everything — within the grace.

        Probes get the grace minus CLOSE_RESERVE; closing gets what is left. A reload still
        parsing in a thread is not waited for.
        """
        self._stopping = True
        loop = asyncio.get_running_loop()
        self.stop()
        assert self.deadline is not None
        started = self.state is not None and self.state.ready
        if started and self.state is not None:
            self.log.info("shutting down", grace=self.shutdown_grace)
            self.state.ready = False
        for task in (*self._tasks, self._reload_worker):
            if task is not None:
                task.cancel()
        await asyncio.gather(*self._tasks, *filter(None, [self._reload_worker]),
                             return_exceptions=True)
        if self._next_reload is not None and not self._next_reload.done():
            self._next_reload.set_result(None)  # waiting /-/reload calls answer now
        reserve = min(CLOSE_RESERVE, self.shutdown_grace / 4)
        if self.discovery is not None:
            await self.discovery.stop()
        if self.scheduler is not None:
            await self.scheduler.stop(max(0.0, self.deadline - reserve - loop.time()))
        try:
            async with asyncio.timeout(max(0.0, self.deadline - loop.time())):
                if self._runner is not None:
                    await self._runner.cleanup()
        except TimeoutError:
            self.log.warning("shutdown grace over; closing connections")
        # Always closed, even past the grace: an unclosed session warns at exit. Both are quick.
        if self.prober is not None:
            await self.prober.close()
        if self.simulator is not None:
            await self.simulator.close()
        if started:
            self.log.info("stopped")


def _warm_up(config: Config) -> None:
    """Build what the first probes would otherwise build on the event loop (worker thread).
    (The token vocabulary is loaded by the prober, only if a server leaves counts out.)"""
    for probe in config.probes.values():
        if probe.image is not None:
            images.image_payload(probe.image)


def serve(daemon: Daemon, config: Config) -> None:
    """Run the daemon on its own event loop until it stops; the process is gone by its deadline.

    Unlike `asyncio.run`, closing the loop does not wait for worker threads: one still busy past
    the grace (a reload parsing a large file, a DNS lookup that hangs) is left behind, and the
    process exits without it.
    """
    daemon.owns_process = True
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(daemon.run(config))
    finally:
        if daemon.signals is not None:
            daemon.signals.detach()
        _close(loop)
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon]
    deadline = daemon.deadline or time.monotonic()
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    busy = sum(thread.is_alive() for thread in others)
    if busy:
        daemon.log.warning("shutdown grace over; exiting without waiting for worker threads",
                           threads=busy)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on the loop and close it, without waiting for worker threads."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()  # shuts the default executor down without waiting

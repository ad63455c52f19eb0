"""HTTP endpoints: /metrics, /probe, /-/healthy, /-/ready, /-/reload, /, /api/v1/results, /config.

`start_server` serves them from a thread and event loop of their own, behind the connection guard
of `exporter.serve.listener` (cap, timeouts, eviction) and the web config; anything that touches
probing (on-demand probes, reloads) runs on the probing loop. Rendering happens in worker threads
and concurrent scrapes share one render, so no client of the port holds the event loop that stamps
tokens: the status page and JSON from an immutable snapshot of the store, the exposition from the
live per-series values, read under the thread contract written in `exposition`. """

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml
from aiohttp import payload, web
from aiohttp.abc import AbstractStreamWriter
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from exporter import __version__
from exporter.config import Config, Series, redacted
from exporter.exposition import protobuf
from exporter.exposition.collector import blocks
from exporter.exposition.families import SkipReason
from exporter.exposition.metrics import ExporterMetrics
from exporter.log import REDACTOR, get_logger
from exporter.result import ProbeResult
from exporter.serve.discovery import Discovery, price_table
from exporter.serve.listener import (
    ConnectionGuard,
    GuardedSite,
    ServerLimits,
    connection_cap,
    install_accept_error_limiter,
    raise_fd_limit,
)
from exporter.serve.ondemand import (
    SCRAPE_TIMEOUT_HEADER,
    ondemand_answer,
    owning_shard,
    probe_deadline,
)
from exporter.serve.pages import render_status_page, results_document
from exporter.serve.results import ResultStore, Snapshot
from exporter.serve.scheduler import Scheduler
from exporter.serve.statedir import StateUsage
from exporter.serve.webconfig import LiveWebConfig


class Coalescer:
    """Runs an async job so that callers arriving during a run share one follow-up run."""

    def __init__(self) -> None:
        self._current: asyncio.Task[None] | None = None
        self._next: asyncio.Task[None] | None = None

    async def run(self, job: Callable[[], Awaitable[None]]) -> None:
        """Run `job` after the current run, sharing that run with every caller waiting now."""
        if self._next is None:
            self._next = asyncio.create_task(self._after(self._current, job))
        await asyncio.shield(self._next)

    async def _after(self, previous: asyncio.Task[None] | None,
                     job: Callable[[], Awaitable[None]]) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        # From here on, a new caller may have changed the file after we read it: it needs
        # another run.
        self._next, self._current = None, asyncio.current_task()
        await job()


class SharedRenders:
    """Concurrent requests for the same page share one render (a scrape flood costs one)."""

    def __init__(self) -> None:
        self._running: dict[Any, asyncio.Future[Any]] = {}

    async def get(self, key: Any, render: Callable[..., Any], *args: Any) -> Any:
        """`render(*args)` in a worker thread, or the result of the same render in flight."""
        future = self._running.get(key)
        if future is None:
            future = asyncio.ensure_future(asyncio.to_thread(render, *args))
            self._running[key] = future
            future.add_done_callback(lambda _f: self._running.pop(key, None))
        return await asyncio.shield(future)


@dataclass
class ServerState:
    """What the endpoints read; the daemon swaps `config` on reload."""

    registry: CollectorRegistry
    metrics: ExporterMetrics
    store: ResultStore
    scheduler: Scheduler
    config: Config | None
    reload: Callable[[], Coroutine[Any, Any, None]]
    ready: bool = False
    last_reload_error: str = ""
    started_at: float = 0.0
    probe_endpoint: bool = True
    probe_min_interval: float = 10.0  # /probe answers from the last result if it is this fresh
    probe_concurrency: int = 4  # on-demand probes in flight at once (each costs money)
    probe_margin: float = 0.5  # seconds kept from the scraper's timeout for the answer itself
    shard: str | None = None  # `--shard i/n` (overrides global.shard), to explain 404s
    # The request parameters adapted after servers refused them (`/config` shows them).
    adaptations: Callable[[], list[dict[str, str]]] | None = None
    loop_lag_recent: float = 0.0  # worst event-loop lag over the last minute (seconds)
    discovery: Discovery | None = None  # the discovering targets' model lists
    state_usage: StateUsage | None = None  # the state directory, as of the latest sweep
    loop: asyncio.AbstractEventLoop | None = None  # the probing loop (set by start_server)
    reloads: Coalescer = field(default_factory=Coalescer)
    renders: SharedRenders = field(default_factory=SharedRenders)
    _probes_in_flight: int = 0


STATE = web.AppKey("state", ServerState)
GZIP_WBITS = 16 + zlib.MAX_WBITS  # zlib's gzip container (header and trailer)


def create_app(state: ServerState, middlewares: Sequence[Any] = ()) -> web.Application:
    """The aiohttp application serving every endpoint."""
    app = web.Application(middlewares=list(middlewares))
    app[STATE] = state
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/probe", probe_handler)
    app.router.add_get("/-/healthy", healthy_handler)
    app.router.add_get("/-/ready", ready_handler)
    app.router.add_post("/-/reload", reload_handler)
    app.router.add_put("/-/reload", reload_handler)
    app.router.add_get("/", status_handler)
    app.router.add_get("/api/v1/results", results_handler)
    app.router.add_get("/config", config_handler)
    return app


class HTTPServer:
    """The endpoints, served from a thread and event loop of their own.

    A flood of requests then costs that loop, not the one that stamps tokens: the probing loop
    only waits for the GIL (handed over within the daemon's 0.5 ms switch interval), and every
    call into probing state (on-demand probes, reloads) runs on the probing loop
    (`on_probing_loop`).
    """

    def __init__(self) -> None:
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    async def start(self, setup: Callable[[], Awaitable[tuple[web.AppRunner, int]]],
                    exception_handler: Any = None) -> None:
        """Run `setup()` (returns the runner and bound port) on the HTTP loop, then serve."""
        started: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            loop.set_exception_handler(exception_handler)  # the same sinks as the main loop
            self._loop = loop
            try:
                self._runner, self.port = loop.run_until_complete(setup())
            except BaseException as exc:
                started.set_exception(exc)
                loop.close()
                return
            started.set_result(None)
            try:
                loop.run_forever()
            finally:
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_default_executor())
                loop.close()

        self._thread = threading.Thread(target=run, name="http", daemon=True)
        self._thread.start()
        await asyncio.wrap_future(started)

    async def cleanup(self) -> None:
        """Close every connection and stop the HTTP thread."""
        loop, runner, thread = self._loop, self._runner, self._thread
        if loop is None or runner is None or thread is None or loop.is_closed():
            return
        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(runner.cleanup(), loop))
        finally:
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join, 10)


async def start_server(state: ServerState, host: str, port: int, *,
                       web_config: LiveWebConfig | None = None,
                       limits: ServerLimits | None = None, logger: Any = None) -> HTTPServer:
    """Serve the endpoints on host:port (own thread and loop) behind the connection guard and
    the web config.

    Raises the descriptor limit, caps connections below it, and logs EMFILE on accept once per
    interval. `cleanup()` stops everything (the web config watcher included).
    """
    log = logger or get_logger()
    limits = limits or ServerLimits()
    fd_limit = raise_fd_limit()
    guard = ConnectionGuard(connection_cap(limits, fd_limit), limits, logger=log,
                            rate_limit=web_config.take_token if web_config is not None else None)
    loop = asyncio.get_running_loop()
    state.loop = loop

    async def setup() -> tuple[web.AppRunner, int]:
        middlewares: list[Any] = [guard.middleware]
        if web_config is not None:
            middlewares.append(web_config.middleware)
        app = create_app(state, middlewares)
        if web_config is not None:
            app.cleanup_ctx.append(_watching(web_config))
        runner = web.AppRunner(app, access_log=None, handle_signals=False,
                               keepalive_timeout=limits.idle_timeout,
                               lingering_time=limits.lingering_time)
        await runner.setup()
        tls = web_config.ssl_context if web_config is not None and web_config.tls else None
        site = GuardedSite(runner, host, port, guard=guard, tls=tls)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        install_accept_error_limiter(asyncio.get_running_loop(),
                                     limits.accept_error_log_interval, log)
        return runner, site.port

    server = HTTPServer()
    await server.start(setup, loop.get_exception_handler())
    state.metrics.own.register(guard.collector())
    if web_config is not None:
        state.metrics.own.register(web_config.collector())
    log.info("http limits", max_connections=guard.cap, fd_limit=fd_limit,
             header_timeout=limits.header_timeout, idle_timeout=limits.idle_timeout)
    return server


async def on_probing_loop(state: ServerState, job: Callable[..., Coroutine[Any, Any, Any]],
                          *args: Any) -> Any:
    """Run `job(*args)` on the loop that probes (this one when the app runs there, as in
    tests), and wait for it here."""
    loop = state.loop
    if loop is None or loop is asyncio.get_running_loop():
        return await job(*args)
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(job(*args), loop))


def _watching(web_config: LiveWebConfig) -> Callable[[web.Application], Any]:
    async def watch(_app: web.Application) -> Any:
        task = asyncio.create_task(web_config.watch(), name="web config watcher")
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        web_config.close()

    return watch


def _render_exposition(registry: Any, accept: str, gzip_ok: bool,
                       metrics: ExporterMetrics | None = None) -> tuple[bytes, str, bool]:
    chunks, content_type, gzipped = _render_chunks(registry, accept, gzip_ok, metrics)
    return b"".join(chunks), content_type, gzipped


def _render_chunks(registry: Any, accept: str, gzip_ok: bool,
                   metrics: ExporterMetrics | None = None) -> tuple[list[bytes], str, bool]:
    """The page in pieces (the whole page from the incremental renderer's caches)."""
    encoder, content_type = choose_encoder(accept)
    if protobuf.wants_protobuf(accept):
        content_type = protobuf.CONTENT_TYPE
        chunks = (metrics.protobuf_chunks() if metrics is not None
                  else [protobuf.from_client(registry.collect())])
    elif metrics is not None:  # the whole page: the incremental renderer
        chunks = metrics.render_chunks(
            openmetrics=content_type.startswith("application/openmetrics"))
    else:
        chunks = [encoder(registry)]
    if gzip_ok:
        # zlib releases the GIL while compressing, so this costs the event loop nothing.
        compressor = zlib.compressobj(1, zlib.DEFLATED, GZIP_WBITS)
        compressed = [compressor.compress(block) for block in blocks(chunks)]
        return [*compressed, compressor.flush()], content_type, True
    return chunks, content_type, False


class _PagePayload(payload.Payload):
    """A rendered page sent block by block (see `exposition.blocks`), with its length."""

    def __init__(self, chunks: list[bytes], content_type: str) -> None:
        super().__init__(chunks, content_type=content_type)
        self._size = sum(map(len, chunks))

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._value).decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        for block in blocks(self._value):
            await writer.write(block)


async def metrics_handler(request: web.Request) -> web.Response:
    """Prometheus exposition (OpenMetrics when asked, so exemplars carry response ids)."""
    state = request.app[STATE]
    names = request.query.getall("name[]", [])
    registry = state.metrics.restricted(names) if names else state.registry
    accept = ",".join(request.headers.getall("Accept", []))
    gzip_ok = "gzip" in request.headers.get("Accept-Encoding", "")
    kind = (protobuf.CONTENT_TYPE if protobuf.wants_protobuf(accept)
            else choose_encoder(accept)[1])
    key = (kind, gzip_ok, tuple(sorted(set(names))))
    chunks, content_type, gzipped = await state.renders.get(
        key, _render_chunks, registry, accept, gzip_ok, None if names else state.metrics)
    headers = {"Content-Type": content_type}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=_PagePayload(chunks, content_type), headers=headers)


async def probe_handler(request: web.Request) -> web.Response:
    """Run one configured (target, model, probe) now and return its measurements."""
    state = request.app[STATE]
    if not state.probe_endpoint:
        return web.Response(status=404, text="the /probe endpoint is disabled\n")
    names = [request.query.get(k, "") for k in ("target", "model", "probe")]
    config = state.config
    if config is None:
        return web.Response(status=503, text="no config loaded\n")
    if not all(names):
        return web.Response(status=400, text="target, model and probe are required\n")
    key = (names[0], names[1], names[2])
    series = config.find_series(*key)
    if series is None:
        owner = owning_shard(config, key, state.shard)
        if owner is not None:
            return web.Response(status=404, text=f"series {'/'.join(key)} belongs to shard "
                                f"{owner}; scrape that replica\n")
        return web.Response(status=400, text="no such configured series: "
                            f"target={names[0]!r} model={names[1]!r} probe={names[2]!r}\n")
    last = state.store.latest(series.key)
    headers: dict[str, str] = {}
    result: ProbeResult | None = None
    skipped: SkipReason | None = None
    if last is not None and time.time() - last.finished_at < state.probe_min_interval:
        result = last  # fresh enough: don't pay for another call
        headers["X-Probe-Cached"] = "1"
    elif state._probes_in_flight >= state.probe_concurrency:
        return web.Response(status=429, text="too many on-demand probes in flight\n")
    else:
        deadline = probe_deadline(series.timeout, request.headers.get(SCRAPE_TIMEOUT_HEADER),
                                  state.probe_margin)
        state._probes_in_flight += 1
        try:
            result, skipped = await on_probing_loop(state, _probe_now, state, series, deadline)
        finally:
            state._probes_in_flight -= 1
        if skipped is not None:
            headers["X-Probe-Skipped"] = skipped.value
    answer = ondemand_answer(series, config.global_.labels, result,
                             cached="X-Probe-Cached" in headers, skipped=skipped)
    body, content_type, _ = await asyncio.to_thread(
        _render_exposition, answer, request.headers.get("Accept", ""), False)
    return web.Response(body=body, headers={"Content-Type": content_type, **headers})


async def _probe_now(state: ServerState, series: Series, deadline: float
                     ) -> tuple[ProbeResult | None, SkipReason | None]:
    """On the probing loop: no request when the budget is spent or Retry-After runs, else one."""
    skipped = state.scheduler.skip_reason(series)
    if skipped is not None:
        state.metrics.record_skip(series.key, skipped)
        return None, skipped
    return await state.scheduler.run_now(series, deadline=deadline), None


async def healthy_handler(request: web.Request) -> web.Response:
    """Liveness: the process serves HTTP."""
    return web.Response(text="Healthy.\n")


async def ready_handler(request: web.Request) -> web.Response:
    """Readiness: a config is loaded and probing."""
    if request.app[STATE].ready:
        return web.Response(text="Ready.\n")
    return web.Response(status=503, text="Not ready.\n")


async def reload_handler(request: web.Request) -> web.Response:
    """Reload the config file; a bad file keeps the old config running.

    Requests arriving during a reload share one follow-up reload, so a flood costs two.
    """
    state = request.app[STATE]
    await state.reloads.run(lambda: on_probing_loop(state, state.reload))
    if state.last_reload_error:
        return web.Response(status=500, text=REDACTOR(f"reload failed, old config kept:\n"
                                                      f"{state.last_reload_error}\n"))
    return web.Response(text="Config reloaded.\n")


def _state_info(state: ServerState) -> dict[str, Any]:
    return {"version": __version__, "ready": state.ready,
            "config_reload_error": state.last_reload_error or None,
            "in_flight": state.scheduler.in_flight, "tasks": len(asyncio.all_tasks(state.loop)),
            "event_loop_lag_max_seconds": state.loop_lag_recent,
            "budget_problem": (state.scheduler.budget.problem or None
                               if state.scheduler.budget is not None else None),
            "discovery": state.discovery.describe(time.time()) if state.discovery else [],
            "state": state.state_usage.describe() if state.state_usage else None,
            "unpriced": sorted({s.key for s in state.config.series if s.price is None}
                               if state.config else ()),
            "price_sources": {"/".join(s.key): s.price.source.value
                              for s in (state.config.series if state.config else ())
                              if s.price is not None},
            "prices_refused": {"/".join(s.key): s.refused_price.describe()
                               for s in (state.config.series if state.config else ())
                               if s.refused_price is not None},
            "state_dir": str(state.config.state_dir)
            if state.config is not None and state.config.state_dir is not None else None,
            # When the gateway says a probed model retires (unix time), by (target, model).
            "retirements": sorted({(s.target.name, s.model, s.gateway.retires)
                                   for s in state.config.series if s.gateway is not None
                                   and s.gateway.retires is not None}
                                  if state.config else ()),
            # The probed models the price library marks deprecated by their provider (undated).
            "deprecated": state.config.deprecated() if state.config else []}


def _snapshot(state: ServerState) -> Snapshot:
    """The store's results with the identity series' states and the judged board (values
    nobody changes)."""
    return state.store.snapshot(state.scheduler.identity.statuses, state.scheduler.judge.board)


def state_files(state: ServerState) -> dict[str, Any]:
    """Where the running config keeps what outlives a restart (`/config`)."""
    config = state.config
    assert config is not None
    budget = state.scheduler.budget
    return {"directory": str(config.state_dir) if config.state_dir is not None else None,
            "budget_record": str(budget.path) if budget is not None and budget.path else None,
            "identity_records": [
                {"target": t, "model": m, "probe": p, "record": s.record}
                for (t, m, p), s in state.scheduler.identity.statuses.items()
                if s.reference_series == (t, m, p)]}


async def results_handler(request: web.Request) -> web.Response:
    """Every series' last result and recent failures, as JSON."""
    state = request.app[STATE]
    body = await asyncio.to_thread(results_document, _snapshot(state), _state_info(state))
    return web.Response(body=body, content_type="application/json")


async def config_handler(request: web.Request) -> web.Response:
    """The loaded config with secrets redacted (YAML; `?format=json` for JSON)."""
    state = request.app[STATE]
    if state.config is None:
        return web.Response(status=503, text="no config loaded\n")
    # Redacted by name, then every string by the redactor (which also knows the secrets of
    # earlier configs), then the serialised text once more.
    data = redacted(state.config)
    if state.adaptations is not None:
        data["adapted_parameters"] = state.adaptations()
    data["prices"] = price_table(state.config)
    data["deprecated"] = state.config.deprecated()  # beside the prices the library gave
    data["state"] = {**state_files(state),
                     **(state.state_usage.describe() if state.state_usage is not None else {})}
    if state.discovery is not None:
        data["discovery"] = state.discovery.describe(time.time())
    data = REDACTOR.tree(data)
    if request.query.get("format") == "json":
        return web.Response(text=REDACTOR.net(orjson.dumps(data).decode()),
                            content_type="application/json")
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return web.Response(text=REDACTOR.net(text), content_type="text/plain")


async def status_handler(request: web.Request) -> web.Response:
    """The human status page."""
    state = request.app[STATE]
    page = await asyncio.to_thread(render_status_page, _snapshot(state),
                                   _state_info(state), time.time())
    return web.Response(text=page, content_type="text/html", charset="utf-8")

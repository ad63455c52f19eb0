"""The listening socket, hardened: no client can hold the port, exhaust descriptors or flood logs.

    accept ─▶ _Connection (raw protocol: cap, state, deadline)
                 └─▶ [TLS: asyncio's SSLProtocol with the context current at accept]
                        └─▶ aiohttp's RequestHandler

- **A connection cap** below RLIMIT_NOFILE (a reserve stays free for probes, files and the
  simulator). At the cap a new connection evicts one that costs nobody a request, in this
  order: the oldest *silent* one (connected, never sent a byte), the oldest *slow* one (its
  request head or TLS handshake started over a second ago), then an *idle* keep-alive one
  (answered; preferably of the peer address holding the most connections, so a flood from one
  host recycles its own and a scraper's kept-alive connection goes last). When nothing can be
  evicted (every connection busy or just sending its request), the newcomer is closed at
  once. Idle and slow clients can never lock a scraper out, and our own connections never
  drive accept() into EMFILE.
- **Deadlines.** The request head (TLS handshake included) must arrive within `header_timeout`
  of connecting, or of the first byte after an idle period (slowloris). A kept-alive connection
  may stay idle, or leave its response unread, for `idle_timeout`.
- **EMFILE on accept** (descriptors used up elsewhere) is logged once per interval, not once per
  attempt: asyncio reports each failed accept() through the loop's exception handler.
- **Requests that fail to parse** (a control character in a header, a header over the size
  limit) are answered `400` without echoing a byte, take a rate-limit token like any request,
  and are logged at most once per client and interval (`malformed`), never with their bytes.

The raw protocol sits below TLS so that a connection still in its handshake can be counted,
evicted and timed out like any other, and so that each handshake uses the newest certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import ssl
import time
from asyncio import sslproto
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.exposition.families import BY_KEY, CloseReason, Family
from exporter.log import get_logger
from exporter.serve.malformed import LOG_INTERVAL, MAX_CLIENTS, MalformedLog, kind_of, refusal

# A soft limit of "unlimited" is read as this many descriptors (select/epoll need a number).
UNLIMITED_FDS = 1 << 20
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """How much of the process one client, or all of them, may hold."""

    max_connections: int = 1024  # lowered further to fit the descriptor limit
    header_timeout: float = 10.0  # connect (or first byte after idle) → request head read
    idle_timeout: float = 60.0  # keep-alive idle, or a response the client does not read
    request_grace: float = 1.0  # a request head arriving this long is not evicted for others
    write_grace: float = 5.0  # an answer unread this long may be cut for a newcomer
    fd_reserve: int = 128  # descriptors always left for probes, files and the simulator
    accept_error_log_interval: float = 10.0
    lingering_time: float = 2.0  # reading an unread request body after answering
    malformed_log_interval: float = LOG_INTERVAL  # one line per client per interval, at most
    malformed_log_clients: int = MAX_CLIENTS  # clients named per interval; the rest summed


class ConnectionState(StrEnum):
    """Where a connection is in its request cycle."""

    READING = "reading"  # TLS handshake or request head in progress
    BUSY = "busy"  # a handler is running
    IDLE = "idle"  # answered; waiting for the next request


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit where allowed; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return UNLIMITED_FDS
    target = UNLIMITED_FDS if hard == resource.RLIM_INFINITY else hard
    if soft < target:
        # Not allowed everywhere (e.g. macOS caps it below the hard limit): keep the soft one.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return UNLIMITED_FDS if soft == resource.RLIM_INFINITY else soft


def connection_cap(limits: ServerLimits, fd_limit: int) -> int:
    """The connection cap: `max_connections`, but always leaving a reserve of descriptors."""
    reserve = max(limits.fd_reserve, fd_limit // 4)
    return max(1, min(limits.max_connections, max(fd_limit - reserve, fd_limit // 2)))


class _Connection:
    """One accepted connection below aiohttp (and below TLS): state, deadline, raw transport."""

    def __init__(self, guard: ConnectionGuard, build: Callable[[], tuple[Any, RequestHandler]]
                 ) -> None:
        self._guard = guard
        self._build = build
        self.inner: Any = None  # the protocol asyncio would have used (SSLProtocol or handler)
        self.handler: RequestHandler | None = None
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.state = ConnectionState.READING
        self.since = 0.0  # when it entered its state (loop time)
        self.first_byte: float | None = None  # when the request (or handshake) in READING began
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        if not self._guard.admit(self):
            transport.abort()
            return
        self.inner, self.handler = self._build()
        self._guard.attach(self)
        self.inner.connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_timer()
        self._guard.forget(self)
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return None if self.inner is None else self.inner.eof_received()

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def _arrived(self) -> None:
        if self.state is ConnectionState.IDLE:  # a new request starts: its head has a deadline
            self._enter(ConnectionState.READING, self._guard.limits.header_timeout)
        if self.state is ConnectionState.READING and self.first_byte is None:
            self.first_byte = asyncio.get_running_loop().time()
            self._guard.place(self)

    # -- state -----------------------------------------------------------------------------

    def _enter(self, state: ConnectionState, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        self.state = state
        self.since = loop.time()
        self.first_byte = None
        self._cancel_timer()
        if timeout is not None:
            self._timer = loop.call_later(timeout, self._expire)
        self._guard.place(self)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def start(self) -> None:
        """Admitted: the request head must arrive within the header timeout."""
        self._enter(ConnectionState.READING, self._guard.limits.header_timeout)

    def busy(self) -> None:
        """A handler started."""
        self._enter(ConnectionState.BUSY, None)

    def idle(self) -> None:
        """The handler returned; the response may still be on its way out."""
        self._enter(ConnectionState.IDLE, self._guard.limits.idle_timeout)

    def unsent(self) -> int:
        """Bytes of response not yet taken by the kernel."""
        return 0 if self.transport is None else self.transport.get_write_buffer_size()

    def delivered(self, now: float) -> bool:
        """Idle with its answer taken by the kernel (or left unread past the write grace)."""
        return self.unsent() == 0 or now - self.since > self._guard.limits.write_grace

    def close(self, reason: CloseReason | None) -> None:
        """Drop the connection now (no goodbye: the peer is idle, slow or being evicted)."""
        self._cancel_timer()
        if reason is not None:
            self._guard.closed[reason] += 1
        self._guard.forget(self)
        if self.transport is not None:
            self.transport.abort()

    def _expire(self) -> None:
        self._timer = None
        if self.state is ConnectionState.READING:
            self.close(CloseReason.HEADER_TIMEOUT)
        elif self.state is ConnectionState.IDLE:
            self.close(CloseReason.IDLE_TIMEOUT)


class _GuardedHandler(RequestHandler):
    """aiohttp's request handler, with the guard answering requests that fail to parse (aiohttp
    would log a traceback quoting their bytes and echo them in its 400)."""

    __slots__ = ("_guard",)

    def __init__(self, guard: ConnectionGuard, server: web.Server) -> None:
        # What `server()` does (web.Server keeps the runner's settings in `_kwargs`).
        super().__init__(server, loop=asyncio.get_running_loop(), **server._kwargs)
        self._guard = guard

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if isinstance(exc, HttpProcessingError) and request.writer.output_size == 0:
            return self._guard.refuse_malformed(self, exc)
        return super().handle_error(request, status, exc, message)


class _LeanSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a 32 KiB read buffer: its 256 KiB default would let a
    thousand idle connections pin 256 MB (a TLS record is at most 16 KiB)."""

    max_size = 32 * 1024


class _PlainConnection(_Connection, asyncio.Protocol):
    """A plain-HTTP connection: bytes go straight to aiohttp."""

    def data_received(self, data: bytes) -> None:
        self._arrived()
        if self.inner is not None:
            self.inner.data_received(data)


class _TLSConnection(_Connection, asyncio.BufferedProtocol):
    """An HTTPS connection: bytes go to asyncio's TLS protocol, which reads into its buffer."""

    def get_buffer(self, sizehint: int) -> Any:
        return self.inner.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._arrived()
        self.inner.buffer_updated(nbytes)


class ConnectionGuard:
    """Admits, tracks, times out and evicts the connections of one listening socket."""

    def __init__(self, cap: int, limits: ServerLimits, *, logger: Any = None,
                 rate_limit: Callable[[], bool] | None = None) -> None:
        self.cap = cap
        self.limits = limits
        self.closed: Counter[CloseReason] = Counter()
        self.malformed = MalformedLog(logger or get_logger(), limits.malformed_log_interval,
                                      limits.malformed_log_clients)
        self._rate_limit = rate_limit  # the web config's token bucket: False when spent
        self._open: set[_Connection] = set()
        self._peers: Counter[str] = Counter()  # open connections by peer address
        # Eviction candidates by tier, each in the order they entered it (oldest first).
        self._silent: dict[_Connection, None] = {}  # READING, not a byte yet
        self._reading: dict[_Connection, None] = {}  # READING since `first_byte`
        self._idle: dict[_Connection, None] = {}  # IDLE
        self._by_handler: dict[RequestHandler, _Connection] = {}

    @property
    def open(self) -> int:
        """Connections held now."""
        return len(self._open)

    def admit(self, conn: _Connection) -> bool:
        """Make room for a new connection (evicting one that costs nobody a request) or refuse
        it."""
        if len(self._open) >= self.cap:
            victim = self._victim()
            if victim is None:
                self.closed[CloseReason.REJECTED] += 1
                return False
            victim.close(CloseReason.EVICTED)
        self._open.add(conn)
        self._peers[conn.peer] += 1
        conn.start()
        return True

    def place(self, conn: _Connection) -> None:
        """File `conn` under its eviction tier after a change of state."""
        for tier in (self._silent, self._reading, self._idle):
            tier.pop(conn, None)
        if conn not in self._open:
            return
        if conn.state is ConnectionState.READING:
            (self._silent if conn.first_byte is None else self._reading)[conn] = None
        elif conn.state is ConnectionState.IDLE:
            self._idle[conn] = None

    def _victim(self) -> _Connection | None:
        """Silent first, then slow, then idle (the biggest holder's first); None if none."""
        if self._silent:
            return next(iter(self._silent))
        now = asyncio.get_running_loop().time()
        if self._reading:
            oldest = next(iter(self._reading))
            assert oldest.first_byte is not None
            if now - oldest.first_byte > self.limits.request_grace:
                return oldest
        biggest = max(self._peers, key=self._peers.__getitem__)
        fallback = None
        for conn in self._idle:
            if conn.delivered(now):
                if conn.peer == biggest:
                    return conn
                fallback = fallback or conn
        return fallback

    def attach(self, conn: _Connection) -> None:
        """Remember which aiohttp handler serves `conn` (the middleware looks it up)."""
        assert conn.handler is not None
        self._by_handler[conn.handler] = conn

    def close_waiting(self) -> None:
        """Close every connection that has no request yet (shutdown: TLS handshakes included,
        which aiohttp does not know about)."""
        for conn in [*self._silent, *self._reading]:
            conn.close(None)

    def forget(self, conn: _Connection) -> None:
        """The connection is gone."""
        if conn in self._open:
            self._open.discard(conn)
            self._peers[conn.peer] -= 1
            if not self._peers[conn.peer]:
                del self._peers[conn.peer]
            self.place(conn)
        if conn.handler is not None:
            self._by_handler.pop(conn.handler, None)

    def refuse_malformed(self, handler: RequestHandler,
                         error: BaseException) -> web.StreamResponse:
        """The answer to a request that failed to parse: 400 (429 past the rate limit),
        counted, logged sparingly, never echoed."""
        conn = self._by_handler.get(handler)
        self.closed[CloseReason.MALFORMED] += 1
        self.malformed.record(conn.peer if conn is not None else "unknown", kind_of(error))
        allowed = self._rate_limit is None or self._rate_limit()
        return refusal(400 if allowed else 429)

    def protocol_factory(self, server: web.Server,
                         tls: Callable[[], ssl.SSLContext] | None
                         ) -> Callable[[], _PlainConnection | _TLSConnection]:
        """What `loop.create_server` calls for each accepted connection."""
        loop = asyncio.get_running_loop()
        handshake_timeout = self.limits.header_timeout

        def plain() -> tuple[Any, RequestHandler]:
            handler = _GuardedHandler(self, server)
            return handler, handler

        def secure() -> tuple[Any, RequestHandler]:
            assert tls is not None
            handler = _GuardedHandler(self, server)
            # typeshed is narrower than asyncio: no waiter (None), a float timeout.
            inner = _LeanSSLProtocol(
                loop, handler, tls(), None,  # type: ignore[arg-type]
                server_side=True, ssl_handshake_timeout=handshake_timeout)  # type: ignore[arg-type]
            return inner, handler

        if tls is None:
            return lambda: _PlainConnection(self, plain)
        return lambda: _TLSConnection(self, secure)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Mark the connection busy while its handler runs (busy connections are not evicted)."""
        conn = self._by_handler.get(request.protocol)
        if conn is None:  # served without the guard (tests' in-process clients)
            return await handler(request)
        conn.busy()
        try:
            return await handler(request)
        finally:
            if conn in self._open:
                conn.idle()

    def collector(self) -> Collector:
        """Prometheus metrics of this guard (connections held, limit, closed by reason)."""
        return _GuardCollector(self)


class _GuardCollector:
    """Reads a guard's counters at scrape time."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self._guard = guard

    def collect(self) -> Iterator[Metric]:
        guard = self._guard
        held, cap = BY_KEY[Family.HTTP_CONNECTIONS], BY_KEY[Family.HTTP_CONNECTIONS_LIMIT]
        yield GaugeMetricFamily(held.name, held.help, guard.open)
        yield GaugeMetricFamily(cap.name, cap.help, guard.cap)
        spec = BY_KEY[Family.HTTP_CONNECTIONS_CLOSED]
        closed = CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
        for reason in CloseReason:
            closed.add_metric([reason.value], guard.closed[reason])
        yield closed


class GuardedSite(web.BaseSite):
    """An aiohttp site whose connections pass through a `ConnectionGuard`."""

    _server: asyncio.Server | None  # what start() sets (BaseSite declares AbstractServer)

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, guard: ConnectionGuard,
                 tls: Callable[[], ssl.SSLContext] | None = None, backlog: int = 128) -> None:
        super().__init__(runner, backlog=backlog)
        self._host = host
        self._port = port
        self._guard = guard
        self._tls = tls

    @property
    def name(self) -> str:
        """The URL this site serves."""
        return f"{'https' if self._tls else 'http'}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for)."""
        if self._server is not None and self._server.sockets:
            return int(self._server.sockets[0].getsockname()[1])
        return self._port

    async def start(self) -> None:
        """Listen."""
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._guard.protocol_factory(server, self._tls), self._host, self._port,
            backlog=self._backlog, reuse_address=True)

    async def stop(self) -> None:
        """Stop listening and drop connections that never sent a request."""
        await super().stop()
        self._guard.close_waiting()


class AcceptErrorLimiter:
    """Loop exception handler: out-of-descriptor accept() errors once per interval, rest passed on.

    On EMFILE asyncio pauses accepting for a second, but (CPython 3.11) reports every one of the
    up to `backlog` retries of each round through the exception handler, with a traceback.
    """

    def __init__(self, previous: Callable[..., Any] | None, logger: Any, interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._previous = previous
        self._log = logger
        self._interval = interval
        self._clock = clock
        self._last: float | None = None
        self.suppressed = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if (isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS
                and str(context.get("message", "")).startswith("socket.accept()")):
            now = self._clock()
            if self._last is None or now - self._last >= self._interval:
                self._log.error("cannot accept connections: out of resources; retrying",
                                error=os.strerror(exc.errno or 0), repeats=self.suppressed,
                                every_seconds=self._interval)
                self._last, self.suppressed = now, 0
            else:
                self.suppressed += 1
            return
        if self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)


def install_accept_error_limiter(loop: asyncio.AbstractEventLoop, interval: float,
                                 logger: Any = None) -> None:
    """Chain an `AcceptErrorLimiter` in front of the loop's current exception handler."""
    current = loop.get_exception_handler()
    if isinstance(current, AcceptErrorLimiter):
        return
    loop.set_exception_handler(AcceptErrorLimiter(current, logger or get_logger(), interval))

"""The stamping transport: one aiohttp session whose connections note when bytes arrive.

Time is taken where bytes reach the socket (the connection's `data_received`), before aiohttp
parses HTTP and before the reading task wakes, and connection set-up is split into DNS, TCP,
proxy tunnel and TLS stamps. Two of aiohttp's private hooks make that possible:
`TCPConnector._factory` (builds each connection's protocol) and `ResponseHandler._payload` (the
body being fed). They are used only on the aiohttp versions they were read on (`TESTED_AIOHTTP`;
tests/test_transport.py fails loudly when an upgrade changes them); elsewhere reads are stamped
when they return, and the session says so once in the log.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import re
import select
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import HttpProcessingError

from exporter import measure

Clock = Callable[[], float]

# aiohttp versions (major, minor) whose private hooks this module was written against.
TESTED_AIOHTTP = ((3, 9), (3, 14))
# What a body error handed on by `StampingHandler` starts with (see `failures.body_error`).
MALFORMED_BODY = "malformed response body: "


@dataclass(slots=True)
class NetStamps:
    """How one request's connection was made: filled by trace callbacks and the protocol."""

    clock: Clock
    dns_start: float | None = None
    dns_end: float | None = None
    create_start: float | None = None
    create_end: float | None = None
    tcp_connected: float | None = None  # from the connection protocol (see StampingHandler)
    tunnel_open: float | None = None  # https through a proxy: CONNECT answered
    tls_done: float | None = None  # https only
    sent: float | None = None  # request (headers, then body) written
    handler: StampingHandler | None = None  # this request's connection protocol
    reused: bool = False  # the connection came from the pool (reuse_connections)
    stale: bool = False  # the pooled connection was found closed before anything was written
    proxy_handler: StampingHandler | None = None  # the tunnel's connection to the proxy

    def connection(self) -> measure.ConnectStamps:
        """The connection set-up stamps, for `measure.network_phases`."""
        return measure.ConnectStamps(
            start=self.create_start, dns_start=self.dns_start, dns_end=self.dns_end,
            tcp_connected=self.tcp_connected, tunnel_open=self.tunnel_open,
            tls_done=self.tls_done, end=self.create_end)

    def settle(self, stamps: measure.Stamps, https: bool) -> None:
        """Once the response head is in: t0 when the request was written, t_h when the head
        arrived (not when the task woke), and the connection's TCP, tunnel and TLS stamps."""
        if self.sent is not None:
            stamps.t0 = self.sent
        handler = self.handler
        if (handler is not None and handler.headers_at is not None
                and stamps.t_headers is not None
                and stamps.t0 <= handler.headers_at < stamps.t_headers):
            stamps.t_headers = handler.headers_at
        if handler is not None and self.create_start is not None:
            # (`is not None`: a protocol with nothing buffered is falsy)
            first = self.proxy_handler if self.proxy_handler is not None else handler
            self.tcp_connected = first.tcp_connected
            if self.proxy_handler is not None:
                self.tunnel_open = handler.tcp_connected
            if https:
                self.tls_done = handler.handshake_done


# Connections are made inside the probing task, so the request being made is the one in this
# context (one per probe: see StampingHandler.__init__).
CURRENT_REQUEST: contextvars.ContextVar[NetStamps | None] = contextvars.ContextVar(
    "llm_probe_request", default=None)


class StampingHandler(ResponseHandler):
    """aiohttp's connection protocol, noting when each piece of the response body arrived.

    `data_received` runs straight from the selector, before aiohttp parses HTTP and before the
    reading task is woken; under load that wake-up waits behind every other ready callback, so a
    stamp taken after `iter_any()` returns is late by exactly the work of other streams. And
    when the reading task falls behind by more than one write of the server, one read returns
    pieces that arrived at different times: each keeps its own arrival time (`arrivals`, by
    body offset), so a token is never stamped with the time of older bytes in front of it.

    It also splits connection set-up: asyncio builds the protocol right after the TCP connect
    and calls `connection_made` once the TLS handshake is done (at once for plain TCP). Through
    a proxy, https takes two: the first on the TCP connection to the proxy, which carries the
    CONNECT; aiohttp builds the second when the proxy has answered it, then runs the TLS
    handshake with the server over the tunnel and calls its `connection_made`.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        super().__init__(loop)
        self._clock = clock
        self.tcp_connected = clock()
        self.handshake_done: float | None = None
        # (when, body bytes fed to the response's reader once that data_received ended)
        self.arrivals: deque[tuple[float, int]] = deque()
        self.body: aiohttp.StreamReader | None = None  # the response being read
        self.headers_at: float | None = None  # when the latest response's head arrived
        net = CURRENT_REQUEST.get()
        if net is not None:
            if net.handler is not None and net.proxy_handler is None:
                net.proxy_handler = net.handler
            net.handler = self

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.handshake_done = self._clock()
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        now = self._clock()
        payload = self._payload
        super().data_received(data)
        if self._payload is not payload and self._payload is not None:
            # A new response's head was in these bytes. On a kept-alive connection the body
            # being read is still the previous response's, and so are the arrivals noted so
            # far: counted against the new body, they would stamp its bytes with old times.
            self.headers_at = now
            self.body = None
            self.arrivals.clear()
        body = self.body or self._payload
        if body is not None and data:
            fed = body.total_bytes
            if not self.arrivals or fed > self.arrivals[-1][1]:
                self.arrivals.append((now, fed))
        # aiohttp (3.14) keeps a parse error of the body (a bad chunk size mid-stream) on the
        # connection and never tells the body's reader, which then waits for the whole probe
        # timeout. Hand the error to the reader, so the probe ends now, as `stream`.
        error = self.exception()
        if (error is not None and payload is not None and not payload.is_eof()
                and payload.exception() is None):
            payload.set_exception(aiohttp.ClientPayloadError(
                f"{MALFORMED_BODY}{parser_words(error) or type(error).__name__}"))

    def peer_gone(self) -> bool:
        """Whether the server closed this idle connection or wrote to it out of turn.

        Between requests nothing may be readable: a pending EOF (or stray bytes) that the loop
        has not processed yet shows here, before a request is written into a dead socket.
        """
        transport = self.transport
        if transport is None or transport.is_closing():
            return True
        sock = transport.get_extra_info("socket")
        if sock is None:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    def reading(self, body: aiohttp.StreamReader, t0: float) -> StampingHandler:
        """Ready to stamp `body`: arrivals of an earlier response on this (pooled) connection
        are dropped."""
        self.body = body
        while self.arrivals and self.arrivals[0][0] < t0:
            self.arrivals.popleft()
        return self


def parser_words(exc: BaseException) -> str:
    """aiohttp's parser's own words for a malformed response, on one line ("" if none)."""
    for error in (exc, exc.__cause__, exc.__context__):
        message = getattr(error, "message", None)
        if isinstance(error, HttpProcessingError | aiohttp.ClientResponseError) and message:
            return " ".join(str(message).split())
    return ""


class StaleConnection(ConnectionError):
    """A pooled connection was closed by the server; raised before the request is written."""


class Connector(aiohttp.TCPConnector):
    """Tells each request which connection it got, skipping pooled ones the server closed."""

    async def connect(self, req: Any, traces: Any,
                      timeout: aiohttp.ClientTimeout) -> Any:  # noqa: ASYNC109 (aiohttp API)
        net = CURRENT_REQUEST.get()
        while True:
            conn = await super().connect(req, traces, timeout)
            handler = conn.protocol
            if (net is None or not isinstance(handler, StampingHandler)
                    or handler is net.handler):  # a new connection (it registered itself)
                return conn
            if not handler.peer_gone():
                net.handler, net.reused = handler, True
                return conn
            conn.close()  # closed by the server behind the loop's back: take the next one


def trace_config() -> aiohttp.TraceConfig:
    """Trace callbacks that stamp DNS, connection set-up and the request write."""
    trace = aiohttp.TraceConfig()

    def stamp(attr: str) -> Callable[..., Any]:
        async def on_signal(session: Any, ctx: SimpleNamespace, params: Any) -> None:
            net = ctx.trace_request_ctx
            if isinstance(net, NetStamps):
                setattr(net, attr, net.clock())
        return on_signal

    trace.on_dns_resolvehost_start.append(stamp("dns_start"))
    trace.on_dns_resolvehost_end.append(stamp("dns_end"))
    trace.on_connection_create_start.append(stamp("create_start"))
    trace.on_connection_create_end.append(stamp("create_end"))

    async def on_write(session: Any, ctx: SimpleNamespace, params: Any) -> None:
        # Runs right before the request's bytes are written. The last chance to find that the
        # server closed a pooled connection: raising here writes nothing, so the request can
        # go out again on another connection without ever reaching the server twice.
        net = ctx.trace_request_ctx
        if isinstance(net, NetStamps):
            if net.reused and net.handler is not None and net.handler.peer_gone():
                net.stale = True
                raise StaleConnection("pooled connection closed by the server")
            net.sent = net.clock()

    trace.on_request_headers_sent.append(stamp("sent"))
    trace.on_request_chunk_sent.append(on_write)
    return trace


def arrival_pieces(arrivals: deque[tuple[float, int]], data: bytes, start: int,
                   read_at: float) -> list[tuple[bytes, float]]:
    """Split one read (body bytes `start`…`start + len(data)`) at the points where its bytes
    arrived in different `data_received` calls; each piece with its arrival time.

    `arrivals` holds (when, body bytes fed by then), oldest first; consumed entries are dropped.
    Bytes with no recorded arrival (another aiohttp) take the time of the read.
    """
    end = start + len(data)
    if not arrivals:
        return [(data, read_at)]
    when, fed = arrivals[0]
    if fed >= end:  # the common case: everything in this read came in one data_received
        if fed == end:
            arrivals.popleft()
        return [(data, when)]
    pieces: list[tuple[bytes, float]] = []
    cut = start
    while arrivals and cut < end:
        when, fed = arrivals[0]
        upto = min(fed, end)
        if upto > cut:
            pieces.append((data[cut - start:upto - start], when))
            cut = upto
        if fed <= end:
            arrivals.popleft()
    if cut < end:
        pieces.append((data[cut - start:], read_at))
    return pieces


def aiohttp_version() -> tuple[int, int]:
    """The installed aiohttp's (major, minor)."""
    major, minor = re.findall(r"\d+", aiohttp.__version__)[:2]
    return int(major), int(minor)


def hooks_usable(connector: aiohttp.TCPConnector, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this aiohttp is one the private hooks were read on, and still has them."""
    low, high = TESTED_AIOHTTP
    if not low <= aiohttp_version() <= high or not hasattr(connector, "_factory"):
        return False
    return hasattr(ResponseHandler(loop), "_payload")


def open_session(clock: Clock, *, reuse_connections: bool = False,
                 logger: Any = None) -> aiohttp.ClientSession:
    """The one session every probe uses, with stamping connections where aiohttp allows.

    By default a fresh connection per probe, as blackbox_exporter does: every probe sees the
    connect phase. With `reuse_connections` (bench: what real clients do) connections are
    pooled, and one the server closed (llama-server closes after each stream despite announcing
    keep-alive) is skipped before a request is written.
    """
    loop = asyncio.get_running_loop()
    connector = Connector(limit=0, ttl_dns_cache=300, force_close=not reuse_connections)
    if hooks_usable(connector, loop):
        # A StampingHandler is a ResponseHandler: only partial's invariance needs the cast.
        connector._factory = cast("functools.partial[ResponseHandler]", functools.partial(
            StampingHandler, loop=loop, clock=clock))
    elif logger is not None:
        logger.warning("aiohttp's connection hooks are not the ones this version was tested "
                       "with; bytes are stamped when reads return (under load later by the "
                       "time the task waits)", aiohttp=aiohttp.__version__,
                       tested=f"{TESTED_AIOHTTP[0]}..{TESTED_AIOHTTP[1]}")
    return aiohttp.ClientSession(
        connector=connector, trace_configs=[trace_config()],
        timeout=aiohttp.ClientTimeout(total=None), auto_decompress=True,
        # One session serves every target: a kept cookie would travel from one target to
        # another on the same host.
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent",),
        headers={"User-Agent": "llm-probe-exporter"},
    )

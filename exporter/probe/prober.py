"""One probe → one `ProbeResult`: send the request, stamp bytes as they arrive, classify failures.

Time is taken right after each read returns, before any decoding or parsing, so the work done on
a chunk never moves its stamp. Every failure maps to exactly one `result` value; a probe never
raises (except cancellation).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import functools
import math
import select
import ssl
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

from exporter import measure
from exporter.config import Case, Expect, ProbeKind, Proxy, Series
from exporter.errors import (
    CheckFailed,
    ConnectFailed,
    CredentialsError,
    EmptyOutput,
    HTTPStatusError,
    ProbeError,
    ProbeTimeout,
    Result,
    StreamError,
    TLSFailed,
)
from exporter.log import REDACTOR, Redactor, get_logger
from exporter.probe import tokens
from exporter.probe.checks import Observed, run_checks
from exporter.probe.keyfile import KeyFiles
from exporter.probe.signing import AwsSigners, SigningError
from exporter.probe.tokens import estimate_tokens
from exporter.protocols import (
    OUTPUT,
    ApiProtocol,
    Embedding,
    Framing,
    HttpRequest,
    SignerFactory,
    StreamParser,
    embedding_input,
    embedding_protocol_for,
    make_prompt,
    new_decoder,
    protocol_for,
)
from exporter.result import ProbeResult, ProbeStamps, TokenSource, ToolCall, Usage

Clock = Callable[[], float]

# Response headers that report the remaining rate limit, by `kind` label value.
RATELIMIT_HEADERS = {
    "x-ratelimit-remaining-requests": "requests",
    "x-ratelimit-remaining-tokens": "tokens",
    "anthropic-ratelimit-requests-remaining": "requests",
    "anthropic-ratelimit-tokens-remaining": "tokens",
}
ERROR_BODY_LIMIT = 64 * 1024
# Longest text kept from the server, per place; every cut goes through `Redactor.clip`.
REASON_LIMIT = 300
MESSAGE_LIMIT = 200
ANSWER_LIMIT = 200
FIELD_LIMIT = 128  # finish reason, response id
_MALFORMED_BODY = "malformed response body: "
# A read packed with events is parsed in slices this long, with the loop free in between, so
# one stream cannot hold up the stamps of others.
EVENT_SLICE = 128
# A broken or hostile Retry-After (`inf`, a date in 9999) must not pause a series for good.
MAX_RETRY_AFTER = 3600.0
# Bodies and answers longer than this are parsed and checked in a worker thread.
THREAD_ABOVE = 64 * 1024
MAX_RESULT_TOOL_CALLS = 8  # tool calls kept in a result (each clipped like the answer)
# Where providers put their request id when the body names none (Bedrock: x-amzn-RequestId).
REQUEST_ID_HEADERS = ("x-request-id", "x-amzn-requestid", "request-id")
# What each framing's body is, for "expected …, got <content type>".
_STREAM_WORDS = {Framing.SSE: "an event stream", Framing.NDJSON: "an NDJSON stream",
                 Framing.EVENTSTREAM: "an AWS event stream"}


@dataclass(slots=True)
class _NetStamps:
    """Filled by aiohttp trace callbacks during one request."""

    clock: Clock
    dns_start: float | None = None
    dns_end: float | None = None
    create_start: float | None = None
    create_end: float | None = None
    tcp_connected: float | None = None  # from the connection protocol (see _StampingHandler)
    tunnel_open: float | None = None  # https through a proxy: CONNECT answered
    tls_done: float | None = None  # https only
    sent: float | None = None  # request (headers, then body) written
    handler: _StampingHandler | None = None  # this request's connection protocol
    reused: bool = False  # the connection came from the pool (reuse_connections)
    stale: bool = False  # the pooled connection was found closed before anything was written
    proxy_handler: _StampingHandler | None = None  # the tunnel's connection to the proxy

    def connection(self) -> measure.ConnectStamps:
        """The connection set-up stamps, for `measure.network_phases`."""
        return measure.ConnectStamps(
            start=self.create_start, dns_start=self.dns_start, dns_end=self.dns_end,
            tcp_connected=self.tcp_connected, tunnel_open=self.tunnel_open,
            tls_done=self.tls_done, end=self.create_end)


@dataclass(slots=True)
class _Attempt:
    """What one probe saw so far; the result is built from it whatever happened."""

    stamps: measure.Stamps
    net: _NetStamps
    parser: StreamParser[Any] | None = None
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    prompt_text: str = ""
    case: int | None = None  # index of the golden-set case this run sent
    expect: Expect | None = None
    checked: bool | None = None  # answer checks ran: passed (True) or failed (False)
    stream_done: bool = False  # the stream (or an embedding's body) ended properly
    embedding: Embedding | None = None


_CURRENT_REQUEST: contextvars.ContextVar[_NetStamps | None] = contextvars.ContextVar(
    "llm_probe_request", default=None)


class _StampingHandler(ResponseHandler):
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
        # Connections are made inside the probing task (one per probe: force_close), so the
        # request being made is the one in this context.
        net = _CURRENT_REQUEST.get()
        if net is not None:
            if net.handler is not None and net.proxy_handler is None:
                net.proxy_handler = net.handler
            net.handler = self

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.handshake_done = self._clock()
        super().connection_made(transport)  # type: ignore[arg-type]

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
                f"{_MALFORMED_BODY}{_http_problem(error) or type(error).__name__}"))

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


class _StaleConnection(ConnectionError):
    """A pooled connection was closed by the server; raised before the request is written."""


class _Connector(aiohttp.TCPConnector):
    """Tells each request which connection it got, skipping pooled ones the server closed."""

    async def connect(self, req: Any, traces: Any,
                      timeout: aiohttp.ClientTimeout) -> Any:  # noqa: ASYNC109 (aiohttp API)
        net = _CURRENT_REQUEST.get()
        while True:
            conn = await super().connect(req, traces, timeout)
            handler = conn.protocol
            if (net is None or not isinstance(handler, _StampingHandler)
                    or handler is net.handler):  # a new connection (it registered itself)
                return conn
            if not handler.peer_gone():
                net.handler, net.reused = handler, True
                return conn
            conn.close()  # closed by the server behind the loop's back: take the next one


def _trace_config() -> aiohttp.TraceConfig:
    """Trace callbacks that stamp DNS, connection set-up and the request write."""
    trace = aiohttp.TraceConfig()

    def stamp(attr: str) -> Callable[..., Any]:
        async def on_signal(session: Any, ctx: SimpleNamespace, params: Any) -> None:
            net = ctx.trace_request_ctx
            if isinstance(net, _NetStamps):
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
        if isinstance(net, _NetStamps):
            if net.reused and net.handler is not None and net.handler.peer_gone():
                net.stale = True
                raise _StaleConnection("pooled connection closed by the server")
            net.sent = net.clock()

    trace.on_request_headers_sent.append(stamp("sent"))
    trace.on_request_chunk_sent.append(on_write)
    return trace


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - now
        except (TypeError, ValueError, OverflowError):
            return None
    if not math.isfinite(seconds):
        return None
    return min(MAX_RETRY_AFTER, max(0.0, seconds))


def _error_text(body: bytes, redactor: Redactor = REDACTOR) -> str:
    """The message of a provider error body (JSON `error.message` or the text itself),
    redacted, then shortened."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    message: Any = None
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            message = error.get("message") or error.get("type") or error.get("code")
        elif isinstance(error, str):
            message = error
    if not message:
        message = body.decode("utf-8", "replace")
    # Redacted before whitespace is squeezed (and before the cut): nothing may reshape a key.
    return redactor.clip(" ".join(redactor(str(message)).split()), REASON_LIMIT)


def _http_problem(exc: BaseException) -> str:
    """aiohttp's parser's own words for a malformed response, on one line ("" if none)."""
    for error in (exc, exc.__cause__, exc.__context__):
        message = getattr(error, "message", None)
        if isinstance(error, HttpProcessingError | aiohttp.ClientResponseError) and message:
            return " ".join(str(message).split())
    return ""


def _request_error(exc: Exception, proxy: Proxy | None = None) -> ProbeError | None:
    """The probe error for a failure before the response headers were in (None: not ours).

    A response aiohttp cannot parse (bad status line, a header over 8 KB, too many headers, a
    bad chunk size in the first read) is the server's fault: `stream`. A connection that could
    not be made or broke first is `connect`, and so is a proxy that refused the connection or
    the CONNECT: the target could not be reached. Reasons are fixed phrases plus the parser's
    or OpenSSL's words, never an exception's repr (it carries the request's URL and headers).
    """
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return ConnectFailed(f"cannot connect to proxy {exc.host}:{exc.port}"
                             f"{_via(proxy)}: {_os_error_text(exc.os_error)}")
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return ConnectFailed(_proxy_status_reason(exc.status, exc.message, proxy,
                                                  exc.request_info.url))
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientConnectorSSLError
                  | aiohttp.ClientSSLError | ssl.SSLError) or isinstance(
                      exc.__cause__, ssl.SSLError):
        # (A TLS 1.3 server checks the client certificate after our handshake is done: its
        # alert comes while the response is awaited, as the cause of a ClientOSError.)
        return TLSFailed(_tls_reason(exc))
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ConnectFailed(f"cannot connect to {exc.host}:{exc.port}: "
                             f"{_os_error_text(exc.os_error)}")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return ConnectFailed("connection failed before response headers: the server closed it")
    if isinstance(exc, aiohttp.ClientOSError):
        return ConnectFailed(f"connection failed before response headers: {_os_error_text(exc)}")
    if isinstance(exc, aiohttp.ClientResponseError | aiohttp.ClientPayloadError
                  | HttpProcessingError):
        return StreamError(f"malformed HTTP response: {_http_problem(exc) or type(exc).__name__}")
    if isinstance(exc, aiohttp.InvalidURL):
        return ConnectFailed(f"invalid URL: {str(exc.url).partition('?')[0]}")
    if isinstance(exc, aiohttp.ClientError):
        return ConnectFailed(f"connection failed before response headers: {type(exc).__name__}")
    return None


def _via(proxy: Proxy | None) -> str:
    return f" (from {proxy.source})" if proxy is not None else ""


def _proxy_status_reason(status: int, message: str | None, proxy: Proxy | None,
                         url: Any) -> str:
    """Plain words for a proxy's non-200 answer to CONNECT (or 407 to a forwarded request)."""
    where = f"proxy {proxy.address}{_via(proxy)}" if proxy is not None else "the proxy"
    phrase = " ".join(str(message or "").split())[:MESSAGE_LIMIT]
    answer = f"{status} {phrase}".strip()
    host = f"{url.host}:{url.port}" if getattr(url, "host", None) else "the target"
    if status in (401, 407):  # tinyproxy answers wrong credentials with 401
        return (f"{where} answered {answer}: it wants credentials, or refused them"
                if proxy is None or proxy.username is None else
                f"{where} answered {answer}: it refused the credentials in the proxy URL")
    if status in (403, 405) or 400 <= status < 500:
        return f"{where} refused CONNECT to {host}: {answer}"
    return f"{where} could not reach {host}: {answer}"


def _sends_basic(url: str, headers: Mapping[str, str]) -> bool:
    """Whether a request carries Basic credentials for the server (a header, or the URL's
    userinfo, from which aiohttp builds one)."""
    return URL(url).user is not None or any(
        name.lower() == "authorization" and value.lower().startswith("basic")
        for name, value in headers.items())


def _proxy_refused(response: aiohttp.ClientResponse, sent_basic: bool) -> bool:
    """Whether a proxied request's 401/407 is the proxy's own refusal, not the server's: a 407
    always; for an http target (whose request the proxy forwards and may answer itself) a 401
    that asks for proxy credentials (`Proxy-Authenticate`), or for Basic credentials when the
    request sent the server none — tinyproxy answers wrong proxy credentials so."""
    if response.status == 407:
        return True
    if response.status != 401 or response.url.scheme != "http":
        return False
    challenge = response.headers.get("WWW-Authenticate", "")
    return "Proxy-Authenticate" in response.headers or (
        challenge.lower().startswith("basic") and not sent_basic)


# OpenSSL's reason codes for alerts and failures, in plain words.
_TLS_REASONS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the server requires a client certificate",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "the server refused the handshake (it may require a "
                                     "client certificate, or share no protocol version or "
                                     "cipher with us)",
    "TLSV1_ALERT_UNKNOWN_CA": "the server does not trust our client certificate (unknown CA)",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the server rejected our client certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the server says our client certificate has expired",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the server rejected our client certificate",
    "TLSV1_ALERT_DECRYPT_ERROR": "the server could not verify our client certificate's key",
    "TLSV1_ALERT_ACCESS_DENIED": "the server denied access to our client certificate",
    "TLSV1_ALERT_PROTOCOL_VERSION": "no TLS version in common with the server",
    "TLSV1_UNRECOGNIZED_NAME": "the server does not know the name (SNI) we asked for",
    "WRONG_VERSION_NUMBER": "the other end does not speak TLS (an http:// port?)",
}


def _tls_reason(exc: BaseException) -> str:
    """Plain words for a failed handshake or certificate check, then OpenSSL's own."""
    error = (getattr(exc, "certificate_error", None) or getattr(exc, "os_error", None)
             or (exc.__cause__ if isinstance(exc.__cause__, ssl.SSLError) else exc))
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = " ".join(str(error.verify_message or error.reason or "").split())
        return f"TLS failed: the server's certificate was not accepted: {detail}"
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason in _TLS_REASONS:
        return f"TLS failed: {_TLS_REASONS[reason]} ({reason.lower()})"
    if isinstance(reason, str) and reason:
        return f"TLS failed: {reason.lower()}"
    if isinstance(error, OSError) and not isinstance(error, ssl.SSLError):
        return f"TLS failed: {_os_error_text(error)}"
    return f"TLS failed: {type(error).__name__}"


def _body_error(exc: Exception) -> StreamError:
    """The probe error for a failure while reading the body (after the headers)."""
    if isinstance(exc, aiohttp.ClientPayloadError | HttpProcessingError):
        text = str(exc)
        problem = _http_problem(exc)
        if text.startswith("Response payload is not completed"):
            # The connection ended before the body did (reset, or closed early).
            return StreamError(f"connection broke mid-stream: {problem or 'body cut short'}")
        if not problem and isinstance(exc, aiohttp.ClientPayloadError):
            # "400, message: <problem>" from aiohttp, or the error _StampingHandler handed on
            problem = text.partition("message:")[2] or text.removeprefix(_MALFORMED_BODY)
        return StreamError(f"{_MALFORMED_BODY}{' '.join(problem.split()) or type(exc).__name__}")
    if isinstance(exc, aiohttp.ClientOSError):
        return StreamError(f"connection broke mid-stream: {_os_error_text(exc)}")
    return StreamError(f"connection broke mid-stream: {type(exc).__name__}")


def _mark(stamps: measure.Stamps, kinds: int, now: float) -> None:
    """Record a read that carried tokens of `kinds` at time `now`."""
    if stamps.t_first is None:
        stamps.t_first = now
    if kinds & OUTPUT and stamps.t_answer is None:
        stamps.t_answer = now
    stamps.t_last = now
    stamps.chunk_times.append(now)


def _pieces(arrivals: deque[tuple[float, int]], data: bytes, start: int,
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


def _os_error_text(error: OSError) -> str:
    """Plain words for a connection error (asyncio's messages name no cause)."""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, ConnectionResetError):
        return "connection reset"
    if isinstance(error, TimeoutError):
        return "connect timed out"
    return error.strerror or str(error) or type(error).__name__


def _status_reason(status: int, message: str, location: str | None,
                   redactor: Redactor) -> str:
    """A plain-words reason for an HTTP error status (`message` is already redacted)."""
    if status < 400:
        where = f" to {redactor.clip(location, MESSAGE_LIMIT)}" if location else ""
        return f"HTTP {status}: redirect{where} not followed (set base_url to the final URL)"
    if status == 404:
        lowered = message.lower()
        if "model" in lowered or "deployment" in lowered:
            return f"HTTP 404: model not found: {message}"
        return f"HTTP 404: path not found (check base_url): {message}"
    return f"HTTP {status}: {message}" if message else f"HTTP {status}"


async def _read_some(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The first bytes (up to `limit`) of a body that is not an event stream; b"" when the
    body is malformed (the status or content type already says what went wrong)."""
    try:
        return await response.content.read(limit)
    except (aiohttp.ClientError, HttpProcessingError):
        return b""


class Prober:
    """Runs probes over one shared aiohttp session."""

    def __init__(self, *, max_output_bytes: int = 4 * 1024 * 1024,
                 redactor: Redactor = REDACTOR, clock: Clock = time.perf_counter,
                 wall_clock: Clock = time.time, logger: Any = None,
                 signers: SignerFactory | None = None,
                 reuse_connections: bool = False) -> None:
        self._max_output_bytes = max_output_bytes
        self._reuse_connections = reuse_connections
        self._redact = redactor
        self._clock = clock
        self._wall = wall_clock
        self._log = logger or get_logger()
        self._keys = KeyFiles(redactor, self._log)
        self._session: aiohttp.ClientSession | None = None
        self._no_stream_options: set[str] = set()  # targets that rejected stream_options
        self._protocols: dict[Any, ApiProtocol] = {}
        self._case_turn: dict[tuple[str, str, str], int] = {}  # golden-set rotation per series
        self._vocabulary: asyncio.Future[str] | None = None  # the one load of tokens' vocabulary
        # Signing over the finished request (SigV4 for `aws_sigv4`), per series.
        self._signers = signers if signers is not None else AwsSigners(redactor)

    async def __aenter__(self) -> Prober:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the shared HTTP session."""
        if self._session is None:
            # By default a fresh connection per probe, as blackbox_exporter does: every probe
            # sees the connect phase. With reuse_connections (bench: what real clients do)
            # connections are pooled, and one the server closed (llama-server closes after each
            # stream despite announcing keep-alive) is skipped before a request is written.
            connector = _Connector(limit=0, ttl_dns_cache=300,
                                   force_close=not self._reuse_connections)
            # Stamp bytes where they arrive (see _StampingHandler); without the private hook
            # (another aiohttp) reads fall back to stamping when iter_any() returns.
            if hasattr(connector, "_factory"):
                connector._factory = functools.partial(
                    _StampingHandler, loop=asyncio.get_running_loop(), clock=self._clock)
            self._session = aiohttp.ClientSession(
                connector=connector, trace_configs=[_trace_config()],
                timeout=aiohttp.ClientTimeout(total=None), auto_decompress=True,
                # One session serves every target: a kept cookie would travel from one target
                # to another on the same host.
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent",),
                headers={"User-Agent": "llm-probe-exporter"},
            )

    async def close(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _protocol(self, series: Series) -> ApiProtocol:
        api = series.target.api
        if api not in self._protocols:
            self._protocols[api] = protocol_for(api)
        return self._protocols[api]

    async def probe(self, series: Series) -> ProbeResult:
        """Run one probe of `series`; never raises except on cancellation."""
        if self._session is None:
            await self.start()
        started = self._wall()
        net = _NetStamps(self._clock)
        attempt = _Attempt(measure.Stamps(t0=self._clock()), net)
        error: ProbeError | None = None
        try:
            async with asyncio.timeout(series.timeout):
                if series.probe.kind is ProbeKind.EMBEDDING:
                    await self._run_embedding(series, attempt)
                else:
                    await self._run(series, attempt)
            await self._vocabulary_for(attempt)
            error = await self._evaluate(series, attempt)
        except ProbeError as exc:
            error = exc
        except TimeoutError:
            error = ProbeTimeout(f"no complete answer within the {series.timeout:g}s timeout")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the daemon must never die of a probe
            error = ProbeError(f"internal error: {type(exc).__name__}: {exc}")
            self._log.exception("probe crashed", target=series.target.name, model=series.model,
                                probe=series.probe_name)
        if attempt.stamps.t_end is None:
            attempt.stamps.t_end = self._clock()  # the probe ended here, whatever waits next
        try:
            await self._vocabulary_for(attempt)
            return self._result(series, attempt, error, started)
        except Exception as exc:  # what a parser collected is unusable: still one result
            self._log.exception("probe result failed", target=series.target.name,
                                model=series.model, probe=series.probe_name)
            attempt.parser = attempt.embedding = None
            error = ProbeError(f"internal error: {type(exc).__name__}: {exc}")
            return self._result(series, attempt, error, started)

    async def _vocabulary_for(self, attempt: _Attempt) -> None:
        """Load the token vocabulary (~40 MiB; once, in a worker thread) when this result will
        count tokens offline: a process whose servers all report usage never pays for it. The
        stream's stamps are taken already; waiting here delays only this result."""
        if tokens.loaded() or not _counts_offline(attempt):
            return
        if self._vocabulary is None:
            self._vocabulary = asyncio.ensure_future(asyncio.to_thread(tokens.warm_up))
        await asyncio.shield(self._vocabulary)  # a cancelled probe leaves the load to others

    async def _run(self, series: Series, attempt: _Attempt) -> None:
        """Send the request and read the stream into `attempt`."""
        protocol = self._protocol(series)
        target = series.target
        nonce = uuid.uuid4().hex[:12] if series.probe.nonce else None
        case = self._next_case(series, attempt)
        prompt = make_prompt(series.probe, case, nonce)
        attempt.prompt_text = "\n".join(filter(None, (prompt.system, *(
            content for _role, content in prompt.messages))))
        key = self._keys.key(target)
        stream_options = target.name not in self._no_stream_options
        for _ in range(2):
            request = protocol.build_request(series, prompt, key, stream_options=stream_options)
            async with await self._send(series, attempt, request) as response:
                if response.status >= 300:
                    message = _error_text(await _read_some(response, ERROR_BODY_LIMIT),
                                          self._redact)
                    if (stream_options and protocol.rejects_stream_options(
                            response.status, message)):
                        # Remembered per target so later probes ask once, not twice.
                        self._no_stream_options.add(target.name)
                        stream_options = False
                        self._log.info("stream_options rejected; retrying without it",
                                       target=target.name)
                        continue
                    raise self._status_error(response, message)
                await self._read_stream(response, protocol, series, attempt)
                return

    async def _run_embedding(self, series: Series, attempt: _Attempt) -> None:
        """Send an embeddings request and read its JSON answer into `attempt`."""
        protocol = embedding_protocol_for(series.target.api)
        attempt.expect = series.probe.expect
        nonce = uuid.uuid4().hex[:12] if series.probe.nonce else None
        text = attempt.prompt_text = embedding_input(series.probe, nonce)
        request = protocol.build_request(series, text, self._keys.key(series.target))
        async with await self._send(series, attempt, request) as response:
            if response.status >= 300:
                raise self._status_error(response, _error_text(
                    await _read_some(response, ERROR_BODY_LIMIT), self._redact))
            body = await self._read_body(response, attempt)
        # A long body (thousands of floats) is parsed off the loop that stamps other streams.
        attempt.embedding = (protocol.parse(body) if len(body) < THREAD_ABOVE
                             else await asyncio.to_thread(protocol.parse, body))
        attempt.stream_done = True

    async def _send(self, series: Series, attempt: _Attempt,
                    request: HttpRequest) -> aiohttp.ClientResponse:
        """Send one request — signed when the target signs, through its proxy, with its TLS —
        stamp t0 and the headers, and note in `attempt.net` how the connection was made.

        A pooled connection that the server closed is found before anything is written, and the
        request then goes once more on a new connection; a request that may have reached the
        server is never sent twice.
        """
        assert self._session is not None
        target = series.target
        url: str | URL = request.url
        signer = self._signers(series)
        if signer is not None:
            try:
                request = await signer(request)  # before t0: signing is not the server's time
            except SigningError as exc:
                raise CredentialsError(str(exc)) from None
            url = URL(request.url, encoded=True)  # exactly what was signed
        headers = request.headers
        proxy = target.proxy
        proxy_headers = None
        if proxy is not None and proxy.authorization is not None:
            credentials = {"Proxy-Authorization": proxy.authorization.reveal()}
            if URL(request.url).scheme == "https":
                proxy_headers = credentials  # on the CONNECT only, never inside the tunnel
            else:
                headers = {**headers, **credentials}  # the proxy forwards this very request
        for last_try in (False, True):
            stamps = attempt.stamps = measure.Stamps(t0=self._clock())
            attempt.net = net = _NetStamps(self._clock)
            _CURRENT_REQUEST.set(net)
            try:
                response = await self._session.post(
                    url, data=request.body, headers=headers, trace_request_ctx=net,
                    ssl=target.tls.ssl, server_hostname=target.tls.server_name,
                    proxy=proxy.url if proxy else None, proxy_headers=proxy_headers,
                    # A redirect would resend the key (x-api-key, custom headers) to wherever it
                    # points and turn the POST into a GET: report it instead.
                    allow_redirects=False,
                )
                break
            except Exception as exc:
                if (isinstance(exc, aiohttp.ClientConnectionError) and net.stale
                        and not last_try):
                    continue
                error = _request_error(exc, proxy)
                if error is None:
                    raise
                raise error from None
        stamps.t_headers = self._clock()
        if net.sent is not None:
            stamps.t0 = net.sent
        handler = net.handler
        if (handler is not None and handler.headers_at is not None
                and stamps.t0 <= handler.headers_at < stamps.t_headers):
            stamps.t_headers = handler.headers_at  # where the head arrived, not when we woke
        if handler is not None and net.create_start is not None:
            # (`is not None`: a protocol with nothing buffered is falsy)
            first = net.proxy_handler if net.proxy_handler is not None else handler
            net.tcp_connected = first.tcp_connected
            if net.proxy_handler is not None:
                net.tunnel_open = handler.tcp_connected
            if response.url.scheme == "https":
                net.tls_done = handler.handshake_done
        attempt.status = response.status
        attempt.headers = response.headers
        if proxy is not None and _proxy_refused(response, _sends_basic(request.url, headers)):
            # An http target's request is forwarded by the proxy, which answers for itself.
            response.release()
            raise ConnectFailed(_proxy_status_reason(response.status, response.reason, proxy,
                                                     response.url))
        return response

    def _status_error(self, response: aiohttp.ClientResponse, message: str) -> HTTPStatusError:
        """The error for a non-2xx answer (`message`: its redacted body text)."""
        retry = parse_retry_after(response.headers.get("Retry-After"), self._wall())
        return HTTPStatusError(response.status, _status_reason(
            response.status, message, response.headers.get("Location"), self._redact), retry)

    def _next_case(self, series: Series, attempt: _Attempt) -> Case | None:
        """The golden-set case of this run (round robin per series), and its checks."""
        cases = series.probe.cases
        attempt.expect = series.probe.expect
        if not cases:
            return None
        turn = self._case_turn.get(series.key, 0)
        self._case_turn[series.key] = turn + 1
        attempt.case = turn % len(cases)
        case = cases[attempt.case]
        attempt.expect = case.expect or series.probe.expect
        return case

    def _wrong_type(self, response: aiohttp.ClientResponse, wanted: str) -> StreamError:
        """The error for a body that is not what the API answers (`wanted`, in words)."""
        content_type = response.headers.get("Content-Type", "")
        return StreamError(f"expected {wanted}, got "
                           f"{self._redact.clip(content_type, 80) or 'no content type'}")

    async def _read_stream(self, response: aiohttp.ClientResponse, protocol: ApiProtocol,
                           series: Series, attempt: _Attempt) -> None:
        """Read the stream, stamping every read that carries tokens."""
        content_type = response.headers.get("Content-Type", "")
        if not any(kind in content_type for kind in protocol.content_types):
            error = self._wrong_type(response, _STREAM_WORDS[protocol.framing])
            body = self._redact.clip(_error_text(await _read_some(response, 2048),
                                                 self._redact), MESSAGE_LIMIT)
            raise StreamError(error.reason + (f": {body}" if body else ""))
        clock = self._clock
        stamps = attempt.stamps
        parser = attempt.parser = protocol.new_parser()
        on_event = parser.on_event
        decoder = new_decoder(protocol.framing)
        limit = self._max_output_bytes
        max_tokens = series.probe.max_tokens
        # Gateways re-chunk (a token may span chunks), so allow well over one chunk per token.
        chunk_limit = 4 * max_tokens + 64
        # Role, usage, ping and keep-alive events carry no token, but each costs a parse.
        event_limit = 8 * max_tokens + 256
        received = token_events = events_seen = 0
        now = clock()
        handler = self._fresh_handler(response, attempt)
        try:
            async for data in response.content.iter_any():
                now = clock()  # stamp first: nothing below may delay it
                start = received
                received += len(data)
                if received > limit:
                    raise StreamError(f"stream exceeded {limit} bytes (max_tokens ignored?); cut")
                # Each piece with the time its bytes reached the socket: earlier than `now` by
                # the time this task waited for the loop.
                pieces = (_pieces(handler.arrivals, data, start, now) if handler is not None
                          else ((data, now),))
                # `now` becomes each piece's arrival: the last one's ends the stream.
                for piece, now in pieces:
                    kinds = 0
                    for i, event in enumerate(decoder.feed(piece), 1):
                        events_seen += 1
                        if events_seen > event_limit:
                            raise StreamError(f"more than {event_limit} events for "
                                              f"max_tokens={max_tokens}; cut")
                        kind = on_event(event)
                        if kind:
                            kinds |= kind
                            token_events += 1
                            if token_events > chunk_limit:
                                raise StreamError(f"server ignored max_tokens={max_tokens}: "
                                                  f"more than {chunk_limit} token chunks; cut")
                        if parser.done:
                            break  # nothing after the end marker counts
                        if not i % EVENT_SLICE:
                            await asyncio.sleep(0)  # a packed read must not hold the loop
                    if kinds:
                        _mark(stamps, kinds, now)
                    if parser.done:
                        break
                if parser.done:
                    break
            else:
                # EOF: an event without its closing blank line is complete only now, but its
                # bytes came with the last read, so it keeps that read's stamp.
                kinds = 0
                for event in decoder.flush():
                    kinds |= on_event(event)
                    if parser.done:
                        break
                if kinds:
                    _mark(stamps, kinds, now)
                now = clock()
        except (aiohttp.ClientError, HttpProcessingError) as exc:
            raise _body_error(exc) from None
        stamps.t_end = now
        if not parser.finished:
            raise StreamError("stream ended without a finish reason or end marker (truncated)")
        attempt.stream_done = True

    def _fresh_handler(self, response: aiohttp.ClientResponse,
                       attempt: _Attempt) -> _StampingHandler | None:
        """This request's connection protocol, ready to stamp the body's first bytes."""
        handler = attempt.net.handler
        if handler is not None:
            handler.body = response.content
            # Pieces of an earlier response on this (pooled) connection are not this one's.
            t0 = attempt.stamps.t0
            while handler.arrivals and handler.arrivals[0][0] < t0:
                handler.arrivals.popleft()
        return handler

    async def _read_body(self, response: aiohttp.ClientResponse, attempt: _Attempt) -> bytes:
        """A whole JSON body (an embedding), up to max_output_bytes; t_end when it ended."""
        if "json" not in response.headers.get("Content-Type", ""):
            raise self._wrong_type(response, "a JSON body")
        limit = self._max_output_bytes
        parts: list[bytes] = []
        received = 0
        try:
            async for data in response.content.iter_any():
                received += len(data)
                if received > limit:
                    raise StreamError(f"body exceeded {limit} bytes; cut")
                parts.append(data)
        except (aiohttp.ClientError, HttpProcessingError) as exc:
            raise _body_error(exc) from None
        attempt.stamps.t_end = self._clock()
        return b"".join(parts)

    async def _evaluate(self, series: Series, attempt: _Attempt) -> ProbeError | None:
        """Judge a complete answer: empty output, reasoning-only, answer checks."""
        parser, embedding = attempt.parser, attempt.embedding
        if embedding is not None:
            if not embedding.dimensions:
                return EmptyOutput("the embedding has no values")
            observed = Observed(dimensions=embedding.dimensions)
        else:
            assert parser is not None
            calls = parser.tool_calls
            if not parser.answer and not calls:
                if parser.reasoning:
                    if parser.hit_limit:
                        return CheckFailed("reasoning used the whole budget: no answer before "
                                           f"max_tokens={series.probe.max_tokens}")
                    return CheckFailed("the model only reasoned and gave no answer")
                return EmptyOutput("the stream finished without an output token")
            observed = Observed("".join(parser.answer), self._output_tokens(parser)[0],
                                parser.finish_reason, calls)
        expect = attempt.expect
        if expect is None:
            return None
        # Long answers, and any regular expression (a pattern can backtrack for long; the match
        # runs without the GIL, under a time limit), are checked off the loop that stamps
        # other streams.
        failure = (run_checks(expect, observed)
                   if observed.size < THREAD_ABOVE and expect.regex is None
                   else await asyncio.to_thread(run_checks, expect, observed))
        attempt.checked = failure is None
        if failure:
            self._log.debug("answer check failed", target=series.target.name,
                            model=series.model, probe=series.probe_name, check=failure,
                            answer=self._redact.clip(observed.answer, ANSWER_LIMIT))
            return CheckFailed(failure)
        return None

    def _output_tokens(self, parser: StreamParser[Any]) -> tuple[int, TokenSource]:
        """N, the tokens that streamed: the server's completion tokens when given (less
        reasoning it reported but never showed: that was spent before the first streamed
        token), else an offline estimate of the streamed text."""
        usage = parser.usage
        if usage is not None and usage.completion is not None:
            hidden = usage.reasoning if usage.reasoning and not parser.reasoning else 0
            return max(0, usage.completion - hidden), TokenSource.USAGE
        text = "".join(parser.answer) + "".join(parser.reasoning) + parser.tool_arguments_text()
        if not text:
            return 0, TokenSource.NONE
        return estimate_tokens(text), TokenSource.ESTIMATE

    def _usage(self, series: Series, attempt: _Attempt, n_tokens: int) -> Usage:
        """Token counts of a complete answer: the server's, estimated only where it said
        nothing (OpenAI's convention: prompt includes cached, completion reasoning)."""
        parser, embedding = attempt.parser, attempt.embedding
        if embedding is not None:
            prompt = embedding.prompt_tokens
            return Usage(prompt=estimate_tokens(attempt.prompt_text) if prompt is None
                         else prompt, completion=0)
        assert parser is not None
        server = parser.usage or Usage()
        completion = server.completion
        reasoning = server.reasoning
        if reasoning is None and parser.reasoning:
            reasoning = _reasoning_share(parser, completion)
        return Usage(
            prompt=server.prompt if server.prompt is not None
            else estimate_tokens(attempt.prompt_text),
            completion=n_tokens if completion is None else completion,
            reasoning=reasoning, cached=server.cached)

    def _result(self, series: Series, attempt: _Attempt, error: ProbeError | None,
                started: float) -> ProbeResult:
        """Build the ProbeResult from what the attempt saw."""
        parser = attempt.parser
        stamps = attempt.stamps
        net = attempt.net
        result = Result.SUCCESS if error is None else error.outcome()
        n_tokens, source = (self._output_tokens(parser) if parser is not None
                            else (0, TokenSource.NONE))
        if stamps.t_end is None:
            stamps.t_end = self._clock()
        timings = measure.timings(stamps, n_tokens, measure.network_phases(net.connection()))
        clocks = ProbeStamps(stamps.t0, stamps.t_headers, stamps.t_first, stamps.t_answer,
                             stamps.t_last, stamps.t_end, unix_offset=self._wall() - self._clock())
        usage = Usage()
        cost = currency = None
        if attempt.stream_done and (parser is not None or attempt.embedding is not None):
            usage = self._usage(series, attempt, n_tokens)
            price = series.price
            if price is not None:
                cost = measure.cost(usage.prompt or 0, usage.completion or 0, usage.cached or 0,
                                    input_price=price.input, output_price=price.output,
                                    cached_price=price.cached_input)
                currency = price.currency
        ratelimit = {}
        for header, kind in RATELIMIT_HEADERS.items():
            value = attempt.headers.get(header)
            if value is not None:
                with contextlib.suppress(ValueError):
                    ratelimit[kind] = float(value)
        answer = "".join(parser.answer) if parser is not None else ""
        clip = self._redact.clip
        finish_reason = parser.finish_reason if parser else None
        response_id = (parser.response_id if parser else None) or next(
            (attempt.headers[h] for h in REQUEST_ID_HEADERS if h in attempt.headers), None)
        calls = parser.tool_calls if parser is not None else ()
        # Every string that came from the server is redacted before it is cut.
        return ProbeResult(
            target=series.target.name, model=series.model, probe=series.probe_name,
            result=result, reason=clip(error.reason, REASON_LIMIT) if error else "",
            timings=timings, usage=usage, output_tokens=n_tokens, token_source=source,
            cost=cost, currency=currency, answer=clip(answer, ANSWER_LIMIT),
            finish_reason=clip(finish_reason, FIELD_LIMIT) if finish_reason else None,
            response_id=clip(response_id, FIELD_LIMIT) if response_id else None,
            status=attempt.status, ratelimit=ratelimit, case=attempt.case,
            checked=attempt.checked,
            retry_after=error.retry_after if isinstance(error, HTTPStatusError) else None,
            tool_calls=tuple(ToolCall(clip(c.name, FIELD_LIMIT), clip(c.arguments, ANSWER_LIMIT))
                             for c in calls[:MAX_RESULT_TOOL_CALLS]),
            server_timings=dict(parser.server_timings) if parser is not None else {},
            dimensions=attempt.embedding.dimensions if attempt.embedding else None,
            started_at=started, finished_at=self._wall(), stamps=clocks,
        )


def _counts_offline(attempt: _Attempt) -> bool:
    """Whether the result of `attempt` may estimate tokens: the server left a count out."""
    if attempt.embedding is not None:
        return attempt.embedding.prompt_tokens is None
    parser = attempt.parser
    if parser is None:
        return False
    usage = parser.usage
    return (usage is None or usage.completion is None or usage.prompt is None
            or (bool(parser.reasoning) and usage.reasoning is None))


def _reasoning_share(parser: StreamParser[Any], completion: int | None) -> int:
    """Reasoning tokens the server did not report: estimated from the reasoning text, and
    when it reported the completion (which includes them), that completion split in the
    proportion of the estimates — never more than the completion itself."""
    thinking = estimate_tokens("".join(parser.reasoning))
    if completion is None:
        return thinking
    answer = estimate_tokens("".join(parser.answer) + parser.tool_arguments_text())
    if not thinking + answer:
        return 0
    return min(completion, round(completion * thinking / (thinking + answer)))

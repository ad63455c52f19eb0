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
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

from exporter import measure
from exporter.checks import run_checks
from exporter.config import Case, Expect, Proxy, Series
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
from exporter.protocols import (
    ANSWER,
    ApiProtocol,
    HttpRequest,
    StreamParser,
    make_prompt,
    protocol_for,
)
from exporter.result import ProbeResult, TokenSource, Usage
from exporter.signing import AwsSigners, SigningError
from exporter.sse import SSEDecoder
from exporter.tokens import estimate_tokens

Clock = Callable[[], float]
# A series' request signer, if it signs: the request as it must be sent (main's
# `protocols.SignerFactory`; `signing.AwsSigners` by default).
SignerFactory = Callable[[Series], Callable[[HttpRequest], Awaitable[HttpRequest]] | None]

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
    parser: StreamParser | None = None
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    prompt_text: str = ""
    case: int | None = None  # index of the golden-set case this run sent
    expect: Expect | None = None
    checked: bool | None = None  # answer checks ran: passed (True) or failed (False)
    stream_done: bool = False  # the stream ended properly


_CURRENT_REQUEST: contextvars.ContextVar[_NetStamps | None] = contextvars.ContextVar(
    "llm_probe_request", default=None)


class _StampingHandler(ResponseHandler):
    """aiohttp's connection protocol, noting when the oldest not-yet-read bytes arrived.

    `data_received` runs straight from the selector, before aiohttp parses HTTP and before the
    reading task is woken; under load that wake-up waits behind every other ready callback, so a
    stamp taken after `iter_any()` returns is late by exactly the work of other streams.

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
        self.arrived: float | None = None
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
        if self.arrived is None:
            self.arrived = self._clock()
        payload = self._payload
        super().data_received(data)
        # aiohttp (3.14) keeps a parse error of the body (a bad chunk size mid-stream) on the
        # connection and never tells the body's reader, which then waits for the whole probe
        # timeout. Hand the error to the reader, so the probe ends now, as `stream`.
        error = self.exception()
        if (error is not None and payload is not None and not payload.is_eof()
                and payload.exception() is None):
            payload.set_exception(aiohttp.ClientPayloadError(
                f"{_MALFORMED_BODY}{_http_problem(error) or type(error).__name__}"))


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
    trace.on_request_headers_sent.append(stamp("sent"))
    trace.on_request_chunk_sent.append(stamp("sent"))
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
    if kinds & ANSWER and stamps.t_answer is None:
        stamps.t_answer = now
    stamps.t_last = now
    stamps.chunk_times.append(now)


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
                 signers: SignerFactory | None = None) -> None:
        self._max_output_bytes = max_output_bytes
        self._redact = redactor
        self._clock = clock
        self._wall = wall_clock
        self._log = logger or get_logger()
        self._session: aiohttp.ClientSession | None = None
        self._no_stream_options: set[str] = set()  # targets that rejected stream_options
        self._protocols: dict[Any, ApiProtocol] = {}
        self._case_turn: dict[tuple[str, str, str], int] = {}  # golden-set rotation per series
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
            # A fresh connection per probe, as blackbox_exporter does: every probe sees the
            # connect phase, and a server that closes after each stream despite announcing
            # keep-alive (llama-server does) cannot fail the next probe on a dead socket.
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, force_close=True)
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
                await self._run(series, attempt)
            error = self._evaluate(series, attempt)
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
        try:
            return self._result(series, attempt, error, started)
        except Exception as exc:  # what a parser collected is unusable: still one result
            self._log.exception("probe result failed", target=series.target.name,
                                model=series.model, probe=series.probe_name)
            attempt.parser = None
            error = ProbeError(f"internal error: {type(exc).__name__}: {exc}")
            return self._result(series, attempt, error, started)

    async def _run(self, series: Series, attempt: _Attempt) -> None:
        """Send the request and read the stream into `attempt`."""
        assert self._session is not None
        protocol = self._protocol(series)
        target = series.target
        nonce = uuid.uuid4().hex[:12] if series.probe.nonce else None
        case = self._next_case(series, attempt)
        prompt = make_prompt(series.probe, case, nonce)
        attempt.prompt_text = "\n".join(filter(None, (prompt.system, *(
            content for _role, content in prompt.messages))))
        stream_options = target.name not in self._no_stream_options
        for _ in range(2):
            request = protocol.build_request(series, prompt, stream_options=stream_options)
            stamps = attempt.stamps = measure.Stamps(t0=self._clock())
            attempt.net = net = _NetStamps(self._clock)
            response = await self._send(series, request, net)
            stamps.t_headers = self._clock()
            if net.sent is not None:
                stamps.t0 = net.sent
            async with response:
                attempt.status = response.status
                attempt.headers = response.headers
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
                    retry = parse_retry_after(response.headers.get("Retry-After"), self._wall())
                    raise HTTPStatusError(response.status, _status_reason(
                        response.status, message, response.headers.get("Location"),
                        self._redact), retry)
                await self._read_stream(response, protocol, series, attempt)
                return

    async def _send(self, series: Series, request: HttpRequest,
                    net: _NetStamps) -> aiohttp.ClientResponse:
        """Send one request on a fresh connection — signed when the target signs, through its
        proxy, with its TLS — and note how the connection was made in `net`."""
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
        except Exception as exc:
            error = _request_error(exc, proxy)
            if error is None:
                raise
            raise error from None
        handler = net.handler
        if handler is not None and net.create_start is not None:
            # (`is not None`: a protocol with nothing buffered is falsy)
            first = net.proxy_handler if net.proxy_handler is not None else handler
            net.tcp_connected = first.tcp_connected
            if net.proxy_handler is not None:
                net.tunnel_open = handler.tcp_connected
            if response.url.scheme == "https":
                net.tls_done = handler.handshake_done
        if response.status == 407 and proxy is not None:
            # An http target's request is forwarded by the proxy, which answers for itself.
            response.release()
            raise ConnectFailed(_proxy_status_reason(407, response.reason, proxy, response.url))
        return response

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

    async def _read_stream(self, response: aiohttp.ClientResponse, protocol: ApiProtocol,
                           series: Series, attempt: _Attempt) -> None:
        """Read the event stream, stamping every read that carries tokens."""
        content_type = response.headers.get("Content-Type", "")
        if "text/event-stream" not in content_type:
            body = self._redact.clip(_error_text(await _read_some(response, 2048),
                                                 self._redact), MESSAGE_LIMIT)
            raise StreamError(f"expected an event stream, got "
                              f"{self._redact.clip(content_type, 80) or 'no content type'}"
                              + (f": {body}" if body else ""))
        clock = self._clock
        stamps = attempt.stamps
        parser = attempt.parser = protocol.new_parser()
        on_event = parser.on_event
        decoder = SSEDecoder()
        limit = self._max_output_bytes
        max_tokens = series.probe.max_tokens
        # Gateways re-chunk (a token may span chunks), so allow well over one chunk per token.
        chunk_limit = 4 * max_tokens + 64
        # Role, usage, ping and keep-alive events carry no token, but each costs a parse.
        event_limit = 8 * max_tokens + 256
        received = token_events = events_seen = 0
        now = clock()
        handler = attempt.net.handler
        if handler is not None and (response.content.total_bytes == 0 or (
                handler.arrived is not None and handler.arrived < stamps.t0)):
            # Only headers (or an earlier response's bytes) arrived so far: the body's first
            # bytes must take their own stamp.
            handler.arrived = None
        try:
            async for data in response.content.iter_any():
                now = clock()  # stamp first: nothing below may delay it
                if handler is not None:
                    # When the first of these bytes reached the socket: earlier than `now` by
                    # the time this task waited for the loop. Taken, so the next read gets its own.
                    arrived, handler.arrived = handler.arrived, None
                    if arrived is not None:
                        now = arrived
                received += len(data)
                if received > limit:
                    raise StreamError(f"stream exceeded {limit} bytes (max_tokens ignored?); cut")
                kinds = 0
                for i, event in enumerate(decoder.feed(data), 1):
                    events_seen += 1
                    if events_seen > event_limit:
                        raise StreamError(f"more than {event_limit} events for "
                                          f"max_tokens={max_tokens}; cut")
                    kind = on_event(event)
                    if kind:
                        kinds |= kind
                        token_events += 1
                        if token_events > chunk_limit:
                            raise StreamError(f"server ignored max_tokens={max_tokens}: more "
                                              f"than {chunk_limit} token chunks; cut")
                    if parser.done:
                        break  # nothing after the end marker counts
                    if not i % EVENT_SLICE:
                        await asyncio.sleep(0)  # a read packed with events must not hold the loop
                if kinds:
                    _mark(stamps, kinds, now)
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
            raise StreamError("stream ended without a finish reason or [DONE] (truncated)")
        attempt.stream_done = True

    def _evaluate(self, series: Series, attempt: _Attempt) -> ProbeError | None:
        """Judge a complete stream: empty output, reasoning-only, answer checks."""
        parser = attempt.parser
        assert parser is not None
        if not parser.answer:
            if parser.reasoning:
                if parser.finish_reason in ("length", "max_tokens"):
                    return CheckFailed("reasoning used the whole budget: no answer before "
                                       f"max_tokens={series.probe.max_tokens}")
                return CheckFailed("the model only reasoned and gave no answer")
            return EmptyOutput("the stream finished without an output token")
        expect = attempt.expect
        if expect is not None:
            failure = run_checks(expect, "".join(parser.answer), self._output_tokens(parser)[0],
                                 parser.finish_reason)
            attempt.checked = failure is None
            if failure:
                self._log.debug("answer check failed", target=series.target.name,
                                model=series.model, probe=series.probe_name, check=failure,
                                answer=self._redact.clip("".join(parser.answer), ANSWER_LIMIT))
                return CheckFailed(failure)
        return None

    def _output_tokens(self, parser: StreamParser) -> tuple[int, TokenSource]:
        """N: the server's completion_tokens when given, else an offline estimate."""
        if parser.usage is not None and parser.usage.completion is not None:
            return parser.usage.completion, TokenSource.USAGE
        text = "".join(parser.answer) + "".join(parser.reasoning)
        if not text:
            return 0, TokenSource.NONE
        return estimate_tokens(text), TokenSource.ESTIMATE

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
        usage = Usage()
        cost = currency = None
        if parser is not None and attempt.stream_done:
            server = parser.usage or Usage()
            reasoning = server.reasoning
            if reasoning is None and parser.reasoning:
                reasoning = estimate_tokens("".join(parser.reasoning))
            usage = Usage(
                prompt=server.prompt if server.prompt is not None
                else estimate_tokens(attempt.prompt_text),
                completion=n_tokens, reasoning=reasoning, cached=server.cached)
            price = series.price
            if price is not None:
                cost = measure.cost(usage.prompt or 0, n_tokens, usage.cached or 0,
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
        response_id = (parser.response_id if parser else None) or attempt.headers.get(
            "x-request-id")
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
            started_at=started, finished_at=self._wall(),
        )

"""What went wrong, classified once: each failure becomes a `ProbeError` with its `Cause`.

Reasons are fixed phrases plus the words of whoever failed (aiohttp's parser, OpenSSL, the
provider's error message, redacted and cut), never an exception's repr: that carries the
request's URL and headers. Whatever reads a result (hints, tests, the status page) decides on
`result` and `cause`; the reason is for people.
"""

from __future__ import annotations

import email.utils
import errno
import math
import socket
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

from exporter.config import Proxy
from exporter.errors import (
    Cause,
    ConnectFailed,
    HTTPStatusError,
    ProbeError,
    StreamError,
    TLSFailed,
    status_cause,
)
from exporter.log import REDACTOR, Redactor
from exporter.probe.gateways import gateway_cause
from exporter.probe.transport import MALFORMED_BODY, parser_words

# Longest text kept from the server, per place; every cut goes through `Redactor.clip`.
REASON_LIMIT = 300
MESSAGE_LIMIT = 200
# A broken or hostile Retry-After (`inf`, a date in 9999) must not pause a series for good.
MAX_RETRY_AFTER = 3600.0


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


def error_text(body: bytes, redactor: Redactor = REDACTOR) -> str:
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
    return redactor.words(str(message), REASON_LIMIT)


def request_error(exc: Exception, proxy: Proxy | None = None) -> ProbeError | None:
    """The probe error for a failure before the response headers were in (None: not ours).

    A response aiohttp cannot parse (bad status line, a header over 8 KB, too many headers, a
    bad chunk size in the first read) is the server's fault: `stream`. A connection that could
    not be made or broke first is `connect`, and so is a proxy that refused the connection or
    the CONNECT: the target could not be reached.
    """
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return ConnectFailed(f"cannot connect to proxy {exc.host}:{exc.port}"
                             f"{_via(proxy)}: {os_error_text(exc.os_error)}",
                             Cause.PROXY_UNREACHABLE)
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return proxy_answer(exc.status, exc.message, proxy, exc.request_info.url)
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientConnectorSSLError
                  | aiohttp.ClientSSLError | ssl.SSLError) or isinstance(
                      exc.__cause__, ssl.SSLError):
        # (A TLS 1.3 server checks the client certificate after our handshake is done: its
        # alert comes while the response is awaited, as the cause of a ClientOSError.)
        return tls_error(exc)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ConnectFailed(f"cannot connect to {exc.host}:{exc.port}: "
                             f"{os_error_text(exc.os_error)}", _os_cause(exc.os_error))
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return ConnectFailed("connection failed before response headers: the server closed it",
                             Cause.RESET)
    if isinstance(exc, aiohttp.ClientOSError):
        return ConnectFailed(f"connection failed before response headers: {os_error_text(exc)}",
                             _os_cause(exc))
    if isinstance(exc, aiohttp.ClientResponseError | aiohttp.ClientPayloadError
                  | HttpProcessingError):
        return StreamError(f"malformed HTTP response: {parser_words(exc) or type(exc).__name__}",
                           Cause.MALFORMED_HTTP)
    if isinstance(exc, aiohttp.InvalidURL):
        return ConnectFailed(f"invalid URL: {str(exc.url).partition('?')[0]}", Cause.INVALID_URL)
    if isinstance(exc, aiohttp.ClientError):
        return ConnectFailed(f"connection failed before response headers: {type(exc).__name__}")
    return None


def _via(proxy: Proxy | None) -> str:
    return f" (from {proxy.source})" if proxy is not None else ""


def proxy_answer(status: int, message: str | None, proxy: Proxy | None, url: Any) -> ConnectFailed:
    """A proxy's own non-200 answer (to CONNECT, or to a request it forwards): the target
    could not be reached, whatever the status says."""
    where = f"proxy {proxy.address}{_via(proxy)}" if proxy is not None else "the proxy"
    phrase = " ".join(str(message or "").split())[:MESSAGE_LIMIT]
    answer = f"{status} {phrase}".strip()
    host = f"{url.host}:{url.port}" if getattr(url, "host", None) else "the target"
    if status in (401, 407):  # tinyproxy answers wrong credentials with 401
        return ConnectFailed(
            f"{where} answered {answer}: it wants credentials, or refused them"
            if proxy is None or proxy.username is None else
            f"{where} answered {answer}: it refused the credentials in the proxy URL",
            Cause.PROXY_AUTH)
    if 400 <= status < 500:
        return ConnectFailed(f"{where} refused CONNECT to {host}: {answer}", Cause.PROXY_REFUSED)
    return ConnectFailed(f"{where} could not reach {host}: {answer}", Cause.PROXY_CANNOT_REACH)


def sends_basic(url: str, headers: Mapping[str, str]) -> bool:
    """Whether a request carries Basic credentials for the server (a header, or the URL's
    userinfo, from which aiohttp builds one)."""
    return URL(url).user is not None or any(
        name.lower() == "authorization" and value.lower().startswith("basic")
        for name, value in headers.items())


def proxy_refused(response: aiohttp.ClientResponse, sent_basic: bool) -> bool:
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


# OpenSSL's reason codes for alerts and failures: plain words and the cause.
_TLS_REASONS: dict[str, tuple[str, Cause]] = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": ("the server requires a client certificate",
                                          Cause.TLS_CLIENT_CERT_REQUIRED),
    "SSLV3_ALERT_HANDSHAKE_FAILURE": ("the server refused the handshake (it may require a "
                                      "client certificate, or share no protocol version or "
                                      "cipher with us)", Cause.TLS_HANDSHAKE_REFUSED),
    "TLSV1_ALERT_UNKNOWN_CA": ("the server does not trust our client certificate (unknown CA)",
                               Cause.TLS_CLIENT_CERT_REJECTED),
    "SSLV3_ALERT_BAD_CERTIFICATE": ("the server rejected our client certificate",
                                    Cause.TLS_CLIENT_CERT_REJECTED),
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": ("the server says our client certificate has expired",
                                        Cause.TLS_CLIENT_CERT_REJECTED),
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": ("the server rejected our client certificate",
                                        Cause.TLS_CLIENT_CERT_REJECTED),
    "TLSV1_ALERT_DECRYPT_ERROR": ("the server could not verify our client certificate's key",
                                  Cause.TLS_CLIENT_CERT_REJECTED),
    "TLSV1_ALERT_ACCESS_DENIED": ("the server denied access to our client certificate",
                                  Cause.TLS_CLIENT_CERT_REJECTED),
    "TLSV1_ALERT_PROTOCOL_VERSION": ("no TLS version in common with the server",
                                     Cause.TLS_HANDSHAKE_REFUSED),
    "TLSV1_UNRECOGNIZED_NAME": ("the server does not know the name (SNI) we asked for",
                                Cause.TLS_HANDSHAKE),
    "WRONG_VERSION_NUMBER": ("the other end does not speak TLS (an http:// port?)",
                             Cause.TLS_HANDSHAKE),
}
# X509_V_ERR_* codes of a failed check of the server's certificate.
_VERIFY_CAUSES = {
    2: Cause.TLS_UNKNOWN_CA, 18: Cause.TLS_UNKNOWN_CA, 19: Cause.TLS_UNKNOWN_CA,
    20: Cause.TLS_UNKNOWN_CA, 21: Cause.TLS_UNKNOWN_CA,  # issuer unknown, self-signed
    9: Cause.TLS_NOT_YET_VALID, 10: Cause.TLS_EXPIRED,
    62: Cause.TLS_NAME_MISMATCH, 64: Cause.TLS_NAME_MISMATCH,  # host name, IP address
}


def tls_error(exc: BaseException) -> TLSFailed:
    """A failed handshake or certificate check: plain words, then OpenSSL's own."""
    error = (getattr(exc, "certificate_error", None) or getattr(exc, "os_error", None)
             or (exc.__cause__ if isinstance(exc.__cause__, ssl.SSLError) else exc))
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = " ".join(str(error.verify_message or error.reason or "").split())
        return TLSFailed(f"TLS failed: the server's certificate was not accepted: {detail}",
                         _VERIFY_CAUSES.get(error.verify_code, Cause.TLS_CERTIFICATE))
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason in _TLS_REASONS:
        words, cause = _TLS_REASONS[reason]
        return TLSFailed(f"TLS failed: {words} ({reason.lower()})", cause)
    if isinstance(reason, str) and reason:
        return TLSFailed(f"TLS failed: {reason.lower()}")
    if isinstance(error, OSError) and not isinstance(error, ssl.SSLError):
        return TLSFailed(f"TLS failed: {os_error_text(error)}")
    return TLSFailed(f"TLS failed: {type(error).__name__}")


def body_error(exc: Exception) -> StreamError:
    """The probe error for a failure while reading the body (after the headers)."""
    if isinstance(exc, aiohttp.ClientPayloadError | HttpProcessingError):
        text = str(exc)
        problem = parser_words(exc)
        if text.startswith("Response payload is not completed"):
            # The connection ended before the body did (reset, or closed early).
            return StreamError(f"connection broke mid-stream: {problem or 'body cut short'}",
                               Cause.TRUNCATED)
        if not problem and isinstance(exc, aiohttp.ClientPayloadError):
            # "400, message: <problem>" from aiohttp, or the error StampingHandler handed on
            problem = text.partition("message:")[2] or text.removeprefix(MALFORMED_BODY)
        return StreamError(f"{MALFORMED_BODY}{' '.join(problem.split()) or type(exc).__name__}",
                           Cause.MALFORMED_HTTP)
    if isinstance(exc, aiohttp.ClientOSError):
        return StreamError(f"connection broke mid-stream: {os_error_text(exc)}", Cause.TRUNCATED)
    return StreamError(f"connection broke mid-stream: {type(exc).__name__}", Cause.TRUNCATED)


def os_error_text(error: OSError) -> str:
    """Plain words for a connection error (asyncio's messages name no cause)."""
    if isinstance(error, ConnectionRefusedError) or error.errno == errno.ECONNREFUSED:
        return "connection refused"
    if isinstance(error, ConnectionResetError):
        return "connection reset"
    if isinstance(error, TimeoutError):
        return "connect timed out"
    return error.strerror or str(error) or type(error).__name__


def _os_cause(error: OSError) -> Cause:
    if isinstance(error, socket.gaierror):
        return Cause.DNS
    if isinstance(error, ConnectionRefusedError) or error.errno == errno.ECONNREFUSED:
        return Cause.REFUSED
    if isinstance(error, ConnectionResetError | BrokenPipeError):
        return Cause.RESET
    return Cause.CONNECT_FAILED


# How a reason names a gateway's own error, before the gateway's message.
GATEWAY_WORDS: dict[Cause, str] = {
    Cause.GATEWAY_MODEL_NOT_ROUTED: "the gateway routes no model of this name",
    Cause.GATEWAY_NO_ENDPOINT: "no provider behind the gateway takes this request",
    Cause.GATEWAY_KEY_DATABASE: "the gateway knows only its master key (no key database)",
    Cause.GATEWAY_KEY_REJECTED: "the gateway rejected the key",
    Cause.GATEWAY_MODEL_ACCESS: "the gateway key may not use this model",
    Cause.GATEWAY_BUDGET_EXCEEDED: "the gateway budget is spent",
    Cause.KEY_REJECTED: "no API key reached the gateway",
}


def status_error(status: int, message: str, location: str | None,
                 retry_after: float | None, redactor: Redactor = REDACTOR, *,
                 body: bytes = b"") -> HTTPStatusError:
    """The error for a non-2xx answer (`message`: its redacted body text, `body`: the body
    itself), its cause read from a gateway's own error, else the status and the provider's
    words."""
    gateway = gateway_cause(status, body)
    if gateway is not None:
        what = GATEWAY_WORDS[gateway]
        return HTTPStatusError(status, f"HTTP {status}: {what}: {message}" if message
                               else f"HTTP {status}: {what}", retry_after, gateway)
    lowered = message.lower()
    cause = status_cause(status)
    if status < 400:
        where = f" to {redactor.clip(location, MESSAGE_LIMIT)}" if location else ""
        return HTTPStatusError(status, f"HTTP {status}: redirect{where} not followed (set "
                               "base_url to the final URL)", retry_after, cause)
    if status == 404:
        if "model" in lowered or "deployment" in lowered:
            return HTTPStatusError(status, f"HTTP 404: model not found: {message}",
                                   retry_after, Cause.MODEL_NOT_FOUND)
        return HTTPStatusError(status, f"HTTP 404: path not found (check base_url): {message}",
                               retry_after, cause)
    if status == 403:
        if "signature" in lowered:
            cause = Cause.SIGNATURE_REJECTED
        elif any(w in lowered for w in ("security token", "expired", "not authorized")):
            cause = Cause.CREDENTIALS_REFUSED
    elif status == 400 and ("ssl certificate" in lowered or "client certificate" in lowered):
        cause = Cause.CLIENT_CERT_REQUIRED
    return HTTPStatusError(status, f"HTTP {status}: {message}" if message else f"HTTP {status}",
                           retry_after, cause)

"""Probe outcomes and the error tree that maps every failure to one bounded `result` value.

    ProbeError                      (result)
    ├── ProbeTimeout                timeout       whole-probe deadline passed
    ├── ConnectFailed               connect       DNS, refused, reset before headers; a proxy
    │                                             refused the connection or the CONNECT
    ├── TLSFailed                   tls           handshake or certificate failure
    ├── CredentialsError            auth          no credentials to sign with (aws_sigv4)
    ├── HTTPStatusError             auth | not_found | rate_limited | http_4xx | http_5xx
    ├── UpstreamError               upstream      error object inside a 200 stream
    ├── StreamError                 stream        malformed/truncated stream, non-SSE body
    ├── EmptyOutput                 empty         stream ended without an output token
    └── CheckFailed                 check_failed  an answer check did not hold

Anything else raised while probing is reported as `internal`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class Result(StrEnum):
    """The only values the `result` label takes."""

    SUCCESS = "success"
    TIMEOUT = "timeout"
    CONNECT = "connect"
    TLS = "tls"
    AUTH = "auth"
    NOT_FOUND = "not_found"
    RATE_LIMITED = "rate_limited"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    UPSTREAM = "upstream"
    STREAM = "stream"
    EMPTY = "empty"
    CHECK_FAILED = "check_failed"
    INTERNAL = "internal"


class ProbeError(Exception):
    """A probe failed in a known way; `result` is its label value, `reason` is for humans."""

    result: ClassVar[Result] = Result.INTERNAL

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def outcome(self) -> Result:
        """The `result` label value for this failure."""
        return self.result


class ProbeTimeout(ProbeError):
    """The whole-probe deadline passed."""

    result = Result.TIMEOUT


class ConnectFailed(ProbeError):
    """The connection could not be made or broke before the response headers."""

    result = Result.CONNECT


class TLSFailed(ProbeError):
    """The TLS handshake or certificate check failed."""

    result = Result.TLS


class CredentialsError(ProbeError):
    """Credentials to sign the request could not be found or refreshed."""

    result = Result.AUTH


class HTTPStatusError(ProbeError):
    """The server answered with a non-2xx status."""

    def __init__(self, status: int, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.retry_after = retry_after

    def outcome(self) -> Result:
        """Map the status code to its bounded result."""
        return status_result(self.status)


class UpstreamError(ProbeError):
    """The stream carried an error object although the status was 200."""

    result = Result.UPSTREAM


class StreamError(ProbeError):
    """The body was not a well-formed event stream, or it was cut short."""

    result = Result.STREAM


class EmptyOutput(ProbeError):
    """The stream finished without a single output token."""

    result = Result.EMPTY


class CheckFailed(ProbeError):
    """An answer check (`expect`) did not hold."""

    result = Result.CHECK_FAILED


def status_result(status: int) -> Result:
    """The result value for an HTTP error status."""
    if status in (401, 403):
        return Result.AUTH
    if status == 404:
        return Result.NOT_FOUND
    if status == 429:
        return Result.RATE_LIMITED
    if status < 500:  # 3xx too: an unfollowed redirect is a base_url to fix
        return Result.HTTP_4XX
    return Result.HTTP_5XX

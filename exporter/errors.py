"""Probe outcomes and the error tree that maps every failure to one bounded `result` value.

    ProbeError                      (result)
    ├── ProbeTimeout                timeout       whole-probe deadline passed
    ├── ConnectFailed               connect       DNS, refused, reset before headers; a proxy
    │                                             refused the connection or the CONNECT
    ├── TLSFailed                   tls           handshake or certificate failure
    ├── CredentialsError            auth          no credentials to sign with (aws_sigv4)
    ├── HTTPStatusError             auth | not_found | rate_limited | http_4xx | http_5xx
    │                                             by status; a gateway's own error by its
    │                                             cause (GATEWAY_RESULTS)
    ├── UpstreamError               upstream      error object inside a 200 stream
    ├── StreamError                 stream        malformed/truncated stream, non-SSE body
    ├── EmptyOutput                 empty         stream ended without an output token
    └── CheckFailed                 check_failed  an answer check did not hold

Anything else raised while probing is reported as `internal`.

Each error also carries a `Cause`: one step finer than its `result`, fixed where the failure is
classified (`exporter.probe.failures`, the stream parsers), and what hints and tests key on. The
`reason` is for people and may be reworded; nothing decides on its words.
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


class Cause(StrEnum):
    """Why a probe failed, finer than `Result` (one result has several causes)."""

    # timeout
    DEADLINE = "deadline"
    # connect
    PROXY_UNREACHABLE = "proxy_unreachable"      # nothing accepts connections at the proxy
    PROXY_AUTH = "proxy_auth"                    # the proxy wants credentials, or refused them
    PROXY_REFUSED = "proxy_refused"              # the proxy refused to open a tunnel
    PROXY_CANNOT_REACH = "proxy_cannot_reach"    # the proxy could not reach the target
    REFUSED = "refused"                          # nothing accepts connections at host:port
    RESET = "reset"                              # the connection broke before an answer
    DNS = "dns"                                  # the host name does not resolve
    INVALID_URL = "invalid_url"
    CONNECT_FAILED = "connect_failed"            # any other failure before response headers
    # tls
    TLS_CLIENT_CERT_REQUIRED = "tls_client_cert_required"
    TLS_HANDSHAKE_REFUSED = "tls_handshake_refused"
    TLS_CLIENT_CERT_REJECTED = "tls_client_cert_rejected"
    TLS_UNKNOWN_CA = "tls_unknown_ca"            # the server's certificate: untrusted issuer
    TLS_NAME_MISMATCH = "tls_name_mismatch"
    TLS_EXPIRED = "tls_expired"
    TLS_NOT_YET_VALID = "tls_not_yet_valid"
    TLS_CERTIFICATE = "tls_certificate"          # the server's certificate, another reason
    TLS_HANDSHAKE = "tls_handshake"              # the handshake failed otherwise
    # auth
    NO_CREDENTIALS = "no_credentials"            # nothing to sign with (aws_sigv4)
    KEY_REJECTED = "key_rejected"                # 401
    SIGNATURE_REJECTED = "signature_rejected"    # 403: AWS refused the SigV4 signature
    CREDENTIALS_REFUSED = "credentials_refused"  # 403: expired or unauthorised AWS credentials
    FORBIDDEN = "forbidden"                      # 403, another reason
    GATEWAY_KEY_DATABASE = "gateway_key_database"  # LiteLLM without its key database: any
                                                 # key but the master key (400)
    GATEWAY_KEY_REJECTED = "gateway_key_rejected"  # a gateway's virtual key: unknown, expired,
                                                 # blocked, malformed
    GATEWAY_MODEL_ACCESS = "gateway_model_access"  # the key (team, user) may not use the model
    # not_found
    MODEL_NOT_FOUND = "model_not_found"
    PATH_NOT_FOUND = "path_not_found"
    GATEWAY_MODEL_NOT_ROUTED = "gateway_model_not_routed"  # a gateway routes no such model (400)
    GATEWAY_NO_ENDPOINT = "gateway_no_endpoint"  # no provider behind the gateway takes the request
    # rate_limited
    RATE_LIMITED = "rate_limited"
    GATEWAY_BUDGET_EXCEEDED = "gateway_budget_exceeded"  # the key's (team's) budget is spent
    # http_4xx
    REDIRECT = "redirect"                        # 3xx: redirects are not followed
    PARAMETER_REFUSED = "parameter_refused"      # 400 naming a request parameter
    OTHER_API = "other_api"                      # 400: served by another API style only
    CLIENT_CERT_REQUIRED = "client_cert_required"  # 400 from a TLS front wanting a certificate
    BAD_REQUEST = "bad_request"                  # 400, another reason
    CLIENT_ERROR = "client_error"                # another 4xx (payment, quota, policy)
    # http_5xx
    SERVER_ERROR = "server_error"
    # upstream
    UPSTREAM_ERROR = "upstream_error"
    # stream
    WRONG_CONTENT_TYPE = "wrong_content_type"    # not the framing the API answers with
    MALFORMED_HTTP = "malformed_http"            # bad status line, chunk size, headers
    TOO_MANY_EVENTS = "too_many_events"          # far more events or values than an answer
    MAX_TOKENS_IGNORED = "max_tokens_ignored"    # kept streaming past max_tokens; cut
    TRUNCATED = "truncated"                      # the stream ended early or broke
    MALFORMED_STREAM = "malformed_stream"        # the events are not what the API sends
    # empty
    NO_OUTPUT = "no_output"
    # check_failed
    REASONING_EXHAUSTED = "reasoning_exhausted"  # max_tokens spent thinking: no answer
    ONLY_REASONED = "only_reasoned"              # the model reasoned and stopped
    CHECK_FAILED = "check_failed"                # an `expect` check did not hold
    # internal
    INTERNAL = "internal"


class ProbeError(Exception):
    """A probe failed in a known way; `result` is its label value, `reason` is for humans."""

    result: ClassVar[Result] = Result.INTERNAL
    default_cause: ClassVar[Cause] = Cause.INTERNAL

    def __init__(self, reason: str, cause: Cause | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cause = cause or self.default_cause

    def outcome(self) -> Result:
        """The `result` label value for this failure."""
        return self.result


class ProbeTimeout(ProbeError):
    """The whole-probe deadline passed."""

    result = Result.TIMEOUT
    default_cause = Cause.DEADLINE


class ConnectFailed(ProbeError):
    """The connection could not be made or broke before the response headers."""

    result = Result.CONNECT
    default_cause = Cause.CONNECT_FAILED


class TLSFailed(ProbeError):
    """The TLS handshake or certificate check failed."""

    result = Result.TLS
    default_cause = Cause.TLS_HANDSHAKE


class CredentialsError(ProbeError):
    """Credentials to sign the request could not be found or refreshed."""

    result = Result.AUTH
    default_cause = Cause.NO_CREDENTIALS


class HTTPStatusError(ProbeError):
    """The server answered with a non-2xx status."""

    def __init__(self, status: int, reason: str, retry_after: float | None = None,
                 cause: Cause | None = None) -> None:
        super().__init__(reason, cause or status_cause(status))
        self.status = status
        self.retry_after = retry_after

    def outcome(self) -> Result:
        """The bounded result: what a gateway's own error means, else the status's."""
        return GATEWAY_RESULTS.get(self.cause) or status_result(self.status)


class UpstreamError(ProbeError):
    """The stream carried an error object although the status was 200."""

    result = Result.UPSTREAM
    default_cause = Cause.UPSTREAM_ERROR


class StreamError(ProbeError):
    """The body was not a well-formed event stream, or it was cut short."""

    result = Result.STREAM
    default_cause = Cause.MALFORMED_STREAM


class EmptyOutput(ProbeError):
    """The stream finished without a single output token."""

    result = Result.EMPTY
    default_cause = Cause.NO_OUTPUT


class CheckFailed(ProbeError):
    """An answer check (`expect`) did not hold."""

    result = Result.CHECK_FAILED
    default_cause = Cause.CHECK_FAILED


# A gateway's own errors are classified by what they mean, whatever status it chose (LiteLLM
# answers an unrouted model and an unknown key with 400, a missing key with 500).
GATEWAY_RESULTS: dict[Cause, Result] = {
    Cause.GATEWAY_KEY_DATABASE: Result.AUTH,
    Cause.GATEWAY_KEY_REJECTED: Result.AUTH,
    Cause.GATEWAY_MODEL_ACCESS: Result.AUTH,
    Cause.KEY_REJECTED: Result.AUTH,
    Cause.GATEWAY_MODEL_NOT_ROUTED: Result.NOT_FOUND,
    Cause.GATEWAY_NO_ENDPOINT: Result.NOT_FOUND,
    Cause.MODEL_NOT_FOUND: Result.NOT_FOUND,
    Cause.GATEWAY_BUDGET_EXCEEDED: Result.RATE_LIMITED,
}


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


def status_cause(status: int) -> Cause:
    """The cause of an HTTP error status when its body says nothing more."""
    if status < 400:
        return Cause.REDIRECT
    return {400: Cause.BAD_REQUEST, 401: Cause.KEY_REJECTED, 403: Cause.FORBIDDEN,
            404: Cause.PATH_NOT_FOUND, 429: Cause.RATE_LIMITED}.get(
        status, Cause.CLIENT_ERROR if status < 500 else Cause.SERVER_ERROR)

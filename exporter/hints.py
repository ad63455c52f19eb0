"""What a failed probe most likely means and how to fix it: one table, keyed by result.

The prober already says *what* happened (`ProbeResult.reason`); this says *why it usually happens*
and *what to change*, in plain words, for `probe`, `bench` and anyone else showing failures.
Rows are tried in order; the first whose result, status and reason words match wins.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from exporter.config import Series
from exporter.errors import Result
from exporter.log import REDACTOR
from exporter.protocols import protocol_for
from exporter.result import ProbeResult

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                   "all_proxy", "NO_PROXY", "no_proxy")


@dataclass(frozen=True)
class Hint:
    """One row of the hint table: when it applies, and the advice (a format string)."""

    result: Result
    text: str
    status: int | None = None
    words: tuple[str, ...] = ()  # any of these (lowercase) in the reason
    no_key: bool | None = None   # only when the target has (no) API key configured

    def matches(self, result: ProbeResult, has_key: bool | None) -> bool:
        """Whether this row describes `result`."""
        if result.result is not self.result:
            return False
        if self.status is not None and result.status != self.status:
            return False
        if self.words and not any(w in result.reason.lower() for w in self.words):
            return False
        return self.no_key is None or has_key is None or self.no_key == (not has_key)


HINTS: tuple[Hint, ...] = (
    Hint(Result.AUTH, status=401, no_key=True,
         text="no API key is configured for this target: set api_key_env (and export the "
              "variable) or api_key_file"),
    Hint(Result.AUTH, status=401,
         text="the API key was rejected: check that the key from {key_source} is the right one "
              "for this provider, is not expired or revoked, and has no stray whitespace or "
              "newline (e.g. from `echo` into a secret file)"),
    Hint(Result.AUTH, status=403,
         text="the key is valid but not allowed here: check its project, organisation, region or "
              "model permissions with the provider"),
    Hint(Result.NOT_FOUND, words=("model", "deployment"),
         text="the model name is not served by this endpoint: list what it serves "
              "(GET {base_url}/models) and copy the exact id into `models:`"),
    Hint(Result.NOT_FOUND,
         text="the path does not exist: {url} was requested. base_url probably needs "
              "(or must not have) `/v1` at the end; the exporter appends the API path itself"),
    Hint(Result.RATE_LIMITED,
         text="rate limited: probe less often (raise `interval`), lower bench concurrency, or "
              "raise the quota; the daemon waits for Retry-After by itself"),
    Hint(Result.CONNECT, words=("refused", "connect call failed"),
         text="nothing accepts connections at that host and port: check host and port in "
              "base_url ({base_url}) and that the server is running{proxy_note}"),
    Hint(Result.CONNECT, words=("name or service not known", "nodename nor servname",
                                "name resolution", "getaddrinfo", "no address"),
         text="the host name does not resolve: check the spelling of the host in base_url "
              "({base_url}) and this machine's DNS{proxy_note}"),
    Hint(Result.CONNECT,
         text="the connection failed before any answer: check host, port, firewall rules and "
              "whether this network needs a proxy{proxy_note}"),
    Hint(Result.TLS, words=("certificate", "cert"),
         text="the server's certificate was not accepted: wrong host name, an expired or "
              "self-signed certificate, or a private CA (install the CA, or set "
              "`tls_verify: false` for a lab endpoint only)"),
    Hint(Result.TLS,
         text="the TLS handshake failed: is base_url https:// on a plain-HTTP port (use "
              "http://) or an intercepting proxy in the way?"),
    Hint(Result.TIMEOUT,
         text="no complete answer within the {timeout} timeout: the endpoint is slow or "
              "overloaded, or max_tokens is large for its speed; raise `timeout` or lower "
              "`max_tokens`"),
    Hint(Result.HTTP_4XX, words=("redirect",),
         text="the server redirected and the exporter does not follow redirects (the key would "
              "go wherever they point): set base_url to the final URL"),
    Hint(Result.HTTP_4XX, words=("no connected db",),
         text="a LiteLLM proxy without its key database accepts only its master key: use the "
              "master key, or give the proxy a database for virtual keys"),
    Hint(Result.HTTP_4XX, status=400,
         text="the server rejected the request body: a parameter (temperature, max_tokens, "
              "messages, stream_options) may not be supported by this model; read its message "
              "above"),
    Hint(Result.HTTP_4XX,
         text="the server refused the request: read its message above (payment, quota and "
              "content-policy errors land here)"),
    Hint(Result.HTTP_5XX,
         text="the provider or gateway failed: usually transient; retry, and check the "
              "provider's status page if it persists"),
    Hint(Result.UPSTREAM,
         text="the request was accepted, then the stream carried an error object: the model "
              "behind a gateway failed mid-answer (overload, content filter, provider outage)"),
    Hint(Result.STREAM, words=("expected an event stream",),
         text="the answer was not an event stream: base_url may point at a web page, a login or "
              "proxy page, or a server that ignores `stream: true`; check base_url and `api:` "
              "({api})"),
    Hint(Result.STREAM, words=("malformed http", "malformed response body"),
         text="the server's answer was not valid HTTP (a bad status line or chunk size, headers "
              "over 8 KB or too many of them, broken compression): something other than an "
              "HTTP API listens there, or a proxy in between is broken"),
    Hint(Result.STREAM, words=("events for max_tokens", "choices", "json values"),
         text="the server sent far more events (or choices) than one answer needs; the probe "
              "cut it off: check that base_url points at the API you meant"),
    Hint(Result.STREAM, words=("truncated", "broke", "reset"),
         text="the stream was cut short: a proxy or load-balancer idle timeout, or the server "
              "dropped the connection mid-answer"),
    Hint(Result.STREAM, words=("max_tokens", "exceeded"),
         text="the server ignored max_tokens and kept streaming; the probe cut it off"),
    Hint(Result.STREAM,
         text="the stream was malformed: does this server really speak `api: {api}`?"),
    Hint(Result.EMPTY,
         text="the stream finished without a token: the model produced nothing (content "
              "filter, an empty prompt, or max_tokens too small)"),
    Hint(Result.CHECK_FAILED, words=("reasoning used the whole budget",),
         text="a reasoning model spent all of max_tokens thinking: raise the probe's "
              "`max_tokens`"),
    Hint(Result.CHECK_FAILED,
         text="the answer did not pass the probe's `expect` checks; compare the answer with "
              "the check"),
    Hint(Result.INTERNAL,
         text="an exporter error or an invalid setting (e.g. a header value with a newline); "
              "if the config looks right, please report it with the reason"),
)


def _proxy_note(env: Mapping[str, str]) -> str:
    names = [name for name in PROXY_VARIABLES if env.get(name)]
    if not names:
        return ""
    return (f"; proxy variables are set here ({', '.join(names)}): make sure the host is "
            "reachable from this machine without them, or listed in NO_PROXY as intended")


def hint_for(result: ProbeResult, series: Series | None = None, *,
             env: Mapping[str, str] | None = None) -> str:
    """The likely cause and fix of a failed probe ("" for a success)."""
    if result.success:
        return ""
    env = os.environ if env is None else env
    has_key = None if series is None else series.target.api_key is not None
    for row in HINTS:
        if row.matches(result, has_key):
            # The fields come from the config (base_url may hold credentials).
            return REDACTOR(row.text.format_map(_Fields(series, env)))
    return ""


class _Fields(dict[str, str]):
    """Format fields for hint texts; unknown or unavailable values render as '?'."""

    def __init__(self, series: Series | None, env: Mapping[str, str]) -> None:
        super().__init__(proxy_note=_proxy_note(env))
        if series is not None:
            target = series.target
            self.update(base_url=target.base_url, key_source=target.key_source,
                        api=target.api.value, timeout=f"{series.timeout:g}s")
            with contextlib.suppress(ValueError):  # the query is left out: it may carry a key
                self["url"] = protocol_for(target.api).url(series).partition("?")[0]

    def __missing__(self, key: str) -> str:
        return {"base_url": "base_url", "key_source": "its source", "api": "the configured api",
                "timeout": "configured", "url": "the endpoint"}.get(key, "?")

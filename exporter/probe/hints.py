"""What a failed probe most likely means and how to fix it: one table, keyed by result and cause.

The prober already says *what* happened (`ProbeResult.reason`); this says *why it usually happens*
and *what to change*, in plain words, for `probe`, `bench` and anyone else showing failures.
Rows are tried in order; the first whose result and cause match wins (a row without a cause
covers every other cause of its result). Nothing here reads the reason's words.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from yarl import URL

from exporter.config import Series
from exporter.errors import Cause, Result
from exporter.log import REDACTOR
from exporter.protocols import protocol_for
from exporter.result import ProbeResult

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY",
                   "no_proxy")
UNREAD_PROXY_VARIABLES = ("ALL_PROXY", "all_proxy")  # aiohttp does not read them either


@dataclass(frozen=True)
class Hint:
    """One row of the hint table: when it applies, and the advice (a format string)."""

    result: Result
    text: str
    cause: Cause | None = None  # None: any cause of `result`
    no_key: bool | None = None   # only when the target has (no) API key configured

    def matches(self, result: ProbeResult, has_key: bool | None) -> bool:
        """Whether this row describes `result`."""
        if result.result is not self.result:
            return False
        if self.cause is not None and result.cause is not self.cause:
            return False
        return self.no_key is None or has_key is None or self.no_key == (not has_key)


HINTS: tuple[Hint, ...] = (
    Hint(Result.AUTH, cause=Cause.KEY_REJECTED, no_key=True,
         text="no API key is configured for this target: set api_key_env (and export the "
              "variable) or api_key_file"),
    Hint(Result.AUTH, cause=Cause.KEY_REJECTED,
         text="the API key was rejected: check that the key from {key_source} is the right one "
              "for this provider, is not expired or revoked, and has no stray whitespace or "
              "newline (e.g. from `echo` into a secret file)"),
    Hint(Result.AUTH, cause=Cause.NO_CREDENTIALS,
         text="no usable AWS credentials for aws_sigv4. The exporter looks where the AWS SDKs "
              "do: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the shared config and "
              "credentials files (AWS_PROFILE or aws_sigv4.profile), web identity "
              "(AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, as on EKS), container and "
              "instance roles"),
    Hint(Result.AUTH, cause=Cause.SIGNATURE_REJECTED,
         text="AWS rejected the request signature: aws_sigv4.region ({region}) must be the "
              "endpoint's region, this machine's clock must be right (within 5 minutes), and "
              "the secret key must belong to the access key"),
    Hint(Result.AUTH, cause=Cause.CREDENTIALS_REFUSED,
         text="AWS refused the credentials or their permissions: check that they are current "
              "and that their role may call bedrock:InvokeModelWithResponseStream on this model"),
    Hint(Result.AUTH, cause=Cause.GATEWAY_KEY_DATABASE,
         text="a LiteLLM proxy without its key database accepts only its master key, and the "
              "key from {key_source} is not it: use the master key, or give the proxy a "
              "database for virtual keys"),
    Hint(Result.AUTH, cause=Cause.GATEWAY_KEY_REJECTED,
         text="the gateway does not accept the key from {key_source}: a virtual key that is "
              "unknown, expired, blocked or mistyped (LiteLLM: /key/info with the master key "
              "shows it); check for stray whitespace too"),
    Hint(Result.AUTH, cause=Cause.GATEWAY_MODEL_ACCESS,
         text="the gateway key (or its team, user or organisation) may not use this model: add "
              "the model to the key's allowed models (LiteLLM: /key/update `models`, or the "
              "team's), or probe with a key that may"),
    Hint(Result.AUTH, cause=Cause.FORBIDDEN,
         text="the key is valid but not allowed here: check its project, organisation, region or "
              "model permissions with the provider"),
    Hint(Result.NOT_FOUND, cause=Cause.GATEWAY_MODEL_NOT_ROUTED,
         text="the gateway routes no model of this name: names are case-sensitive and must "
              "be a `model_name` of its model list (or an alias); list what this key may use "
              "(GET {base_url}/models) and copy the exact id into `models:`"),
    Hint(Result.NOT_FOUND, cause=Cause.GATEWAY_NO_ENDPOINT,
         text="the gateway knows the model but no provider behind it takes this request: a "
              "parameter no endpoint supports (tools, response_format, max_tokens), or the "
              "account's provider and data-policy settings exclude every endpoint"),
    Hint(Result.NOT_FOUND, cause=Cause.MODEL_NOT_FOUND,
         text="the model name is not served by this endpoint: list what it serves "
              "(GET {base_url}/models) and copy the exact id into `models:`"),
    Hint(Result.NOT_FOUND,
         text="the path does not exist: {url} was requested. base_url probably needs "
              "(or must not have) `/v1` at the end; the exporter appends the API path itself"),
    Hint(Result.RATE_LIMITED, cause=Cause.GATEWAY_BUDGET_EXCEEDED,
         text="the gateway's budget for this key (or its team, user or the whole proxy) is "
              "spent: probes fail until it resets (budget_duration) or its max_budget is "
              "raised; give the probes a key with a budget of their own"),
    Hint(Result.RATE_LIMITED,
         text="rate limited: probe less often (raise `interval`), lower bench concurrency, or "
              "raise the quota; the daemon waits for Retry-After by itself"),
    Hint(Result.CONNECT, cause=Cause.PROXY_UNREACHABLE,
         text="nothing accepts connections at the proxy {proxy}: check its host and port and "
              "that it runs; if this target is reachable without a proxy, set `proxy_url: \"\"` "
              "or list the host in NO_PROXY"),
    Hint(Result.CONNECT, cause=Cause.PROXY_AUTH,
         text="the proxy wants credentials (407 Proxy Authentication Required), or refused the "
              "ones given: put them in the proxy URL ({proxy_source}) as `user:password@` "
              "before the host (percent-encode @, : and / in the password)"),
    Hint(Result.CONNECT, cause=Cause.PROXY_REFUSED,
         text="the proxy refused to open a tunnel to {host}: its rules allow other hosts or "
              "ports only (many allow CONNECT to port 443 alone). Ask its admins to allow it, "
              "or go direct (NO_PROXY, or `proxy_url: \"\"`) if the host is reachable without "
              "the proxy"),
    Hint(Result.CONNECT, cause=Cause.PROXY_CANNOT_REACH,
         text="the proxy could not reach {host}: its DNS or network cannot get there. Is the "
              "host right? An internal host may have to be listed in NO_PROXY"),
    Hint(Result.CONNECT, cause=Cause.REFUSED,
         text="nothing accepts connections at that host and port: check host and port in "
              "base_url ({base_url}) and that the server is running{proxy_note}"),
    Hint(Result.CONNECT, cause=Cause.RESET,
         text="the server dropped the connection before answering: a firewall or load balancer "
              "in the way, a server that crashed, or (https) a server that wants a client "
              "certificate and got none (`tls.cert_file`, `tls.key_file`){proxy_note}"),
    Hint(Result.CONNECT, cause=Cause.DNS,
         text="the host name does not resolve: check the spelling of the host in base_url "
              "({base_url}) and this machine's DNS{proxy_note}"),
    Hint(Result.CONNECT,
         text="the connection failed before any answer: check host, port, firewall rules and "
              "whether this network needs a proxy{proxy_note}"),
    Hint(Result.TLS, cause=Cause.TLS_CLIENT_CERT_REQUIRED,
         text="the server requires a client certificate (mTLS): set `tls.cert_file` and "
              "`tls.key_file` to a certificate issued by a CA the server trusts"),
    Hint(Result.TLS, cause=Cause.TLS_HANDSHAKE_REFUSED,
         text="the server refused the handshake: it may require a client certificate "
              "(`tls.cert_file`, `tls.key_file`) or a TLS version or cipher we do not offer"),
    Hint(Result.TLS, cause=Cause.TLS_CLIENT_CERT_REJECTED,
         text="the server did not accept our client certificate ({cert_file}): it must be "
              "issued by a CA the server trusts, current, and meant for client authentication"),
    Hint(Result.TLS, cause=Cause.TLS_UNKNOWN_CA,
         text="the server's certificate comes from a CA this machine does not trust: a private "
              "or company CA, or a TLS-inspecting proxy. Set `tls.ca_file` to that CA's "
              "certificate (PEM); `tls.insecure_skip_verify: true` only for a lab endpoint"),
    Hint(Result.TLS, cause=Cause.TLS_NAME_MISMATCH,
         text="the server's certificate is not valid for {host}, the host in base_url: use the "
              "name it was issued for in base_url, or keep base_url and set `tls.server_name` "
              "to that name"),
    Hint(Result.TLS, cause=Cause.TLS_EXPIRED,
         text="the server's certificate has expired (or this machine's clock is far off): it "
              "must be renewed on the server"),
    Hint(Result.TLS, cause=Cause.TLS_NOT_YET_VALID,
         text="the server's certificate is not valid yet: this machine's clock, or the "
              "certificate's dates, are wrong"),
    Hint(Result.TLS, cause=Cause.TLS_CERTIFICATE,
         text="the server's certificate was not accepted: wrong host name, an expired or "
              "self-signed certificate, or a private CA (set `tls.ca_file`, or "
              "`tls.insecure_skip_verify: true` for a lab endpoint only)"),
    Hint(Result.TLS,
         text="the TLS handshake failed: is base_url https:// on a plain-HTTP port (use "
              "http://) or an intercepting proxy in the way?"),
    Hint(Result.TIMEOUT,
         text="no complete answer within the {timeout} timeout: the endpoint is slow or "
              "overloaded, or max_tokens is large for its speed; raise `timeout` or lower "
              "`max_tokens`"),
    Hint(Result.HTTP_4XX, cause=Cause.REDIRECT,
         text="the server redirected and the exporter does not follow redirects (the key would "
              "go wherever they point): set base_url to the final URL"),
    Hint(Result.HTTP_4XX, cause=Cause.CLIENT_CERT_REQUIRED,
         text="the server (nginx answers so) requires a client certificate: set "
              "`tls.cert_file` and `tls.key_file`"),
    Hint(Result.HTTP_4XX, cause=Cause.OTHER_API,
         text="the provider serves this request on another API style only (the reason names "
              "it, e.g. `api: openai-responses` for function tools with reasoning on gpt-5.4 "
              "and later, or a Responses-only pro model): set the target's `api:`, or change "
              "the parameter the reason names. docs/reasoning.md lists the families"),
    Hint(Result.HTTP_4XX, cause=Cause.PARAMETER_REFUSED,
         text="the model refuses a value the probe sets (the reason names it and what to set "
              "instead); the exporter adapts only what it chose itself. `probe --show-request` "
              "prints the request; docs/reasoning.md lists what each model family takes"),
    Hint(Result.HTTP_4XX, cause=Cause.BAD_REQUEST,
         text="the server rejected the request body: a parameter (temperature, max_tokens, "
              "reasoning, params) may not be supported by this model; read its message above "
              "and `probe --show-request` for what was sent (docs/reasoning.md)"),
    Hint(Result.HTTP_4XX,
         text="the server refused the request: read its message above (payment, quota and "
              "content-policy errors land here)"),
    Hint(Result.HTTP_5XX,
         text="the provider or gateway failed: usually transient; retry, and check the "
              "provider's status page if it persists"),
    Hint(Result.UPSTREAM,
         text="the request was accepted, then the stream carried an error object: the model "
              "behind a gateway failed mid-answer (overload, content filter, provider outage)"),
    Hint(Result.STREAM, cause=Cause.WRONG_CONTENT_TYPE,
         text="the answer was not an event stream: base_url may point at a web page, a login or "
              "proxy page, or a server that ignores `stream: true`; check base_url and `api:` "
              "({api})"),
    Hint(Result.STREAM, cause=Cause.MALFORMED_HTTP,
         text="the server's answer was not valid HTTP (a bad status line or chunk size, headers "
              "over 8 KB or too many of them, broken compression): something other than an "
              "HTTP API listens there, or a proxy in between is broken"),
    Hint(Result.STREAM, cause=Cause.TOO_MANY_EVENTS,
         text="the server sent far more events (or choices) than one answer needs; the probe "
              "cut it off: check that base_url points at the API you meant"),
    Hint(Result.STREAM, cause=Cause.TRUNCATED,
         text="the stream was cut short: a proxy or load-balancer idle timeout, or the server "
              "dropped the connection mid-answer"),
    Hint(Result.STREAM, cause=Cause.MAX_TOKENS_IGNORED,
         text="the server ignored max_tokens and kept streaming; the probe cut it off"),
    Hint(Result.STREAM,
         text="the stream was malformed: does this server really speak `api: {api}`?"),
    Hint(Result.EMPTY,
         text="the stream finished without a token: the model produced nothing (content "
              "filter, an empty prompt, or max_tokens too small)"),
    Hint(Result.CHECK_FAILED, cause=Cause.REASONING_EXHAUSTED,
         text="a reasoning model spent all of max_tokens thinking: raise the probe's "
              "`max_tokens`"),
    Hint(Result.CHECK_FAILED, cause=Cause.ONLY_REASONED,
         text="the model reasoned, then stopped without an answer: give it more room "
              "(`max_tokens`) or ask for less thinking (`reasoning: {effort: low}`)"),
    Hint(Result.CHECK_FAILED,
         text="the answer did not pass the probe's `expect` checks; compare the answer with "
              "the check"),
    Hint(Result.INTERNAL,
         text="an exporter error or an invalid setting (e.g. a header value with a newline); "
              "if the config looks right, please report it with the reason"),
)


def _proxy_note(series: Series | None, env: Mapping[str, str]) -> str:
    """Which way the probe went, when proxies may be the cause of a connection failure."""
    if series is not None and series.target.proxy is not None:
        return f"; probes go through the proxy {series.target.proxy}"
    names = [name for name in PROXY_VARIABLES if env.get(name)]
    unread = [name for name in UNREAD_PROXY_VARIABLES if env.get(name)]
    note = ""
    if names and series is not None:
        note = (f"; proxy variables are set here ({', '.join(names)}), but this target goes "
                "direct (NO_PROXY matches it, or proxy_url is \"\"): should it use the proxy?")
    elif names:
        note = (f"; proxy variables are set here ({', '.join(names)}): check that NO_PROXY "
                "lists the host if it must be reached directly")
    if unread:
        note += (f"; {' and '.join(unread)} is set but not read: set HTTPS_PROXY/HTTP_PROXY or "
                 "proxy_url if this network needs a proxy")
    return note


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
        super().__init__(proxy_note=_proxy_note(series, env))
        if series is not None:
            target = series.target
            self.update(base_url=target.base_url, key_source=target.key_source,
                        api=target.api.value, timeout=f"{series.timeout:g}s",
                        host=URL(target.base_url).host or "the host")
            if target.proxy is not None:
                self.update(proxy=str(target.proxy), proxy_source=target.proxy.source)
            if target.tls.cert_file is not None:
                self["cert_file"] = str(target.tls.cert_file)
            if target.aws_sigv4 is not None:
                self["region"] = target.aws_sigv4.region
            with contextlib.suppress(ValueError):  # the query is left out: it may carry a key
                self["url"] = protocol_for(target.api).url(series).partition("?")[0]

    def __missing__(self, key: str) -> str:
        return {"base_url": "base_url", "key_source": "its source", "api": "the configured api",
                "timeout": "configured", "url": "the endpoint", "proxy": "(see the reason)",
                "proxy_source": "HTTPS_PROXY / HTTP_PROXY", "host": "the target's host",
                "cert_file": "tls.cert_file", "region": "the configured region"}.get(key, "?")

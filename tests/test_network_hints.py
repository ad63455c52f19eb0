"""The plain-words hints for failures on network paths: one row per reason the prober gives
(tests/test_network_paths.py provokes them for real), and the route note on connect failures."""

from __future__ import annotations

import pytest

from exporter.config import Series, parse_config
from exporter.errors import Cause, Result
from exporter.probe.hints import hint_for
from exporter.result import ProbeResult


def series(**target: object) -> Series:
    return parse_config({
        "probes": {"short": {"prompt": "Hi"}},
        "targets": [{"name": "t", "base_url": "https://api.example:8443/v1", "models": ["m"],
                     **target}],
    }, env={}).series[0]


def failed(result: Result, reason: str, cause: Cause | None = None) -> ProbeResult:
    return ProbeResult("t", "m", "short", result, reason=reason, cause=cause)


PROXIED = {"proxy_url": "http://probe:pw-0123456789abcdef@proxy.corp:3128"}
SIGNED = {"aws_sigv4": {"region": "eu-west-1"}}

ROWS = [
    # (target settings, result, cause, reason, the hint starts with)
    (PROXIED, Result.CONNECT, Cause.PROXY_UNREACHABLE,
     "cannot connect to proxy proxy.corp:3128 (from proxy_url): "
     "connection refused", "nothing accepts connections at the proxy http://proxy.corp:3128 "
     "(proxy_url)"),
    (PROXIED, Result.CONNECT, Cause.PROXY_AUTH,
     "proxy proxy.corp:3128 (from proxy_url) answered 407 Proxy "
     "Authentication Required: it refused the credentials in the proxy URL",
     "the proxy wants credentials (407 Proxy Authentication Required)"),
    (PROXIED, Result.CONNECT, Cause.PROXY_REFUSED,
     "proxy proxy.corp:3128 (from proxy_url) refused CONNECT to "
     "api.example:8443: 403 Forbidden", "the proxy refused to open a tunnel to api.example"),
    (PROXIED, Result.CONNECT, Cause.PROXY_CANNOT_REACH,
     "proxy proxy.corp:3128 (from proxy_url) could not reach "
     "api.example:8443: 502 Bad Gateway", "the proxy could not reach api.example"),
    ({}, Result.CONNECT, Cause.RESET, "connection failed before response headers: connection reset",
     "the server dropped the connection before answering"),
    ({}, Result.TLS, Cause.TLS_UNKNOWN_CA, "TLS failed: the server's certificate was not accepted: "
     "self-signed certificate in certificate chain",
     "the server's certificate comes from a CA this machine does not trust"),
    ({}, Result.TLS, Cause.TLS_UNKNOWN_CA,
     "TLS failed: the server's certificate was not accepted: unable to "
     "get local issuer certificate",
     "the server's certificate comes from a CA this machine does not trust"),
    ({}, Result.TLS, Cause.TLS_NAME_MISMATCH,
     "TLS failed: the server's certificate was not accepted: Hostname "
     "mismatch, certificate is not valid for 'api.example'.",
     "the server's certificate is not valid for api.example, the host in base_url"),
    ({}, Result.TLS, Cause.TLS_NAME_MISMATCH,
     "TLS failed: the server's certificate was not accepted: IP address "
     "mismatch, certificate is not valid for '10.0.0.1'.",
     "the server's certificate is not valid for api.example"),
    ({}, Result.TLS, Cause.TLS_EXPIRED,
     "TLS failed: the server's certificate was not accepted: certificate "
     "has expired", "the server's certificate has expired"),
    ({}, Result.TLS, Cause.TLS_NOT_YET_VALID,
     "TLS failed: the server's certificate was not accepted: certificate "
     "is not yet valid", "the server's certificate is not valid yet"),
    ({}, Result.TLS, Cause.TLS_CLIENT_CERT_REQUIRED,
     "TLS failed: the server requires a client certificate "
     "(tlsv13_alert_certificate_required)", "the server requires a client certificate (mTLS)"),
    ({}, Result.TLS, Cause.TLS_HANDSHAKE_REFUSED,
     "TLS failed: the server refused the handshake (it may require a "
     "client certificate, or share no protocol version or cipher with us) "
     "(sslv3_alert_handshake_failure)", "the server refused the handshake"),
    ({}, Result.TLS, Cause.TLS_CLIENT_CERT_REJECTED,
     "TLS failed: the server rejected our client certificate "
     "(sslv3_alert_bad_certificate)", "the server did not accept our client certificate "
                                      "(tls.cert_file)"),
    ({}, Result.TLS, Cause.TLS_HANDSHAKE,
     "TLS failed: the other end does not speak TLS (an http:// port?) "
     "(wrong_version_number)", "the TLS handshake failed: is base_url https:// on a plain-HTTP "
                               "port"),
    ({}, Result.HTTP_4XX, Cause.CLIENT_CERT_REQUIRED,
     "HTTP 400: No required SSL certificate was sent",
     "the server (nginx answers so) requires a client certificate"),
    (SIGNED, Result.AUTH, Cause.NO_CREDENTIALS,
     "no AWS credentials found: set AWS_ACCESS_KEY_ID and ...",
     "no usable AWS credentials for aws_sigv4"),
    (SIGNED, Result.AUTH, Cause.NO_CREDENTIALS,
     "AWS credentials: The config profile (x) could not be found",
     "no usable AWS credentials for aws_sigv4"),
    (SIGNED, Result.AUTH, Cause.SIGNATURE_REJECTED,
     "HTTP 403: The request signature we calculated does not match "
     "the signature you provided.", "AWS rejected the request signature: aws_sigv4.region "
                                    "(eu-west-1) must be the endpoint's region"),
    (SIGNED, Result.AUTH, Cause.CREDENTIALS_REFUSED,
     "HTTP 403: The security token included in the request is "
     "expired", "AWS refused the credentials or their permissions"),
]


@pytest.mark.parametrize(("target", "result", "cause", "reason", "expected"), ROWS,
                         ids=[row[3][:40] for row in ROWS])
def test_network_failures_get_their_hint(target, result, cause, reason, expected) -> None:
    text = hint_for(failed(result, reason, cause), series(**target), env={})
    assert text.startswith(expected), text
    assert "pw-0123456789abcdef" not in text


@pytest.mark.parametrize(("target", "env", "note"), [
    (PROXIED, {}, "; probes go through the proxy http://proxy.corp:3128 (proxy_url)"),
    ({}, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "api.example"},
     "; proxy variables are set here (HTTPS_PROXY, NO_PROXY), but this target goes direct"),
    ({}, {"ALL_PROXY": "socks5://p:1"}, "; ALL_PROXY is set but not read"),
    ({}, {}, "and that the server is running"),
])
def test_a_connection_failure_names_the_route(target, env, note) -> None:
    refused = failed(Result.CONNECT, "cannot connect to api.example:8443: connection refused",
                     Cause.REFUSED)
    text = hint_for(refused, series(**target), env=env)
    assert note in text, text
    if not env and not target:
        assert text.endswith("and that the server is running")

"""Every network path a company network needs, with real parts: a tinyproxy between the prober
and the simulator (over http, and over https behind a TLS front with a private CA), proxies from
the environment and per target, with and without credentials, NO_PROXY, mTLS, SNI; the phases
stay true and every failure gets a plain-words reason and hint."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.config import Config, SimulatedModel, parse_config
from exporter.errors import Result
from exporter.probe.hints import hint_for
from exporter.probe.prober import Prober
from exporter.result import Phase, ProbeResult
from tests.conftest import free_port
from tests.network_support import (
    TINYPROXY,
    Certificates,
    Relay,
    Tinyproxy,
    TLSFront,
    make_certificates,
    server_context,
    simulator_in_thread,
    tinyproxy,
)
from tests.security.conftest import canary

pytestmark = [pytest.mark.tools,
              pytest.mark.skipif(TINYPROXY is None, reason="tinyproxy is not installed "
                                 "(scripts/install-test-deps installs it)")]

PROFILE = SimulatedModel(ttft=0.05, tpot=0.005, output_tokens=8, jitter=0.0)
USER, PASSWORD = "probe", "proxy-pw-0123456789"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with simulator_in_thread({"sim": PROFILE}) as simulator:
        yield simulator


@pytest.fixture(scope="module")
def fronts(certs, sim) -> Iterator[dict[str, TLSFront]]:
    """TLS fronts of the simulator: plain, mTLS (TLS 1.3 and 1.2), and an expired certificate."""
    made = {
        "tls": TLSFront(server_context(certs), sim.port),
        "mtls": TLSFront(server_context(certs, require_client=True), sim.port),
        "mtls12": TLSFront(server_context(certs, require_client=True,
                                          max_version=ssl.TLSVersion.TLSv1_2), sim.port),
        "expired": TLSFront(server_context(certs, certs.expired), sim.port),
    }
    yield made
    for front in made.values():
        front.close()


@pytest.fixture(scope="module")
def proxies(tmp_path_factory) -> Iterator[dict[str, Tinyproxy]]:
    """tinyproxies: open, with basic auth, and one allowing CONNECT to port 443 only."""
    tmp = tmp_path_factory.mktemp("tinyproxy")
    with tinyproxy(tmp) as open_, tinyproxy(tmp, user=USER, password=PASSWORD) as auth, \
            tinyproxy(tmp, connect_ports=(443,)) as strict:
        yield {"open": open_, "auth": auth, "strict": strict}


def make(base_url: str, *, env: dict[str, str] | None = None, **target: Any) -> Config:
    return parse_config({
        "global": {"timeout": "5s"},
        "probes": {"short": {"prompt": "Say hello.", "max_tokens": 16}},
        "targets": [{"name": "t", "base_url": base_url, "models": ["sim"], **target}],
    }, env=env or {})


async def probe(config: Config) -> ProbeResult:
    async with Prober() as prober:
        return await prober.probe(config.series[0])


def ca(certs: Certificates, **more: Any) -> dict[str, Any]:
    return {"tls": {"ca_file": str(certs.ca), **more}}


def hint(result: ProbeResult, config: Config) -> str:
    return hint_for(result, config.series[0], env={})


def requests_seen(proxy: Tinyproxy, what: str) -> int:
    return sum(what in line for line in proxy.log().splitlines())


# ---------------------------------------------------------------------------------------------
# Proxies


async def test_environment_proxies_carry_https_and_http_probes(sim, fronts, certs,
                                                               proxies) -> None:
    proxy = proxies["open"]
    env = {"HTTPS_PROXY": proxy.url, "HTTP_PROXY": proxy.url}
    tls = fronts["tls"]
    https = await probe(make(f"https://127.0.0.1:{tls.port}/v1", env=env, **ca(certs)))
    http = await probe(make(f"{sim.origin}/v1", env=env))
    assert https.result is Result.SUCCESS, https.reason
    assert http.result is Result.SUCCESS, http.reason
    assert requests_seen(proxy, f"CONNECT 127.0.0.1:{tls.port}") == 1
    assert requests_seen(proxy, f"POST {sim.origin}/v1/chat/completions") == 1
    # https: TCP to the proxy, its CONNECT answer, the handshake through the tunnel
    assert set(https.timings.phases) >= {Phase.CONNECT, Phase.PROXY_TUNNEL, Phase.TLS}
    # http: the proxy forwards the request itself; no tunnel, no TLS
    assert Phase.CONNECT in http.timings.phases
    assert not {Phase.PROXY_TUNNEL, Phase.TLS} & set(http.timings.phases)


async def test_no_proxy_sends_a_target_direct(sim, proxies) -> None:
    proxy = proxies["open"]
    env = {"HTTP_PROXY": proxy.url, "NO_PROXY": "localhost,127.0.0.0/8"}
    before = requests_seen(proxy, "POST ")
    result = await probe(make(f"{sim.origin}/v1", env=env))
    assert result.result is Result.SUCCESS, result.reason
    assert requests_seen(proxy, "POST ") == before


async def test_proxy_url_overrides_the_environment(sim, proxies) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"HTTP_PROXY": dead, "NO_PROXY": "127.0.0.1"}
    # the per-target proxy wins over a dead environment proxy, and over NO_PROXY
    via = await probe(make(f"{sim.origin}/v1", env=env, proxy_url=proxies["open"].url))
    assert via.result is Result.SUCCESS, via.reason
    # and "" goes direct whatever the environment says
    direct = await probe(make(f"{sim.origin}/v1", env={"HTTP_PROXY": dead}, proxy_url=""))
    assert direct.result is Result.SUCCESS, direct.reason


@pytest.mark.parametrize("scheme", ["https", "http"])
async def test_proxy_credentials(scheme, sim, fronts, certs, proxies) -> None:
    proxy = proxies["auth"]
    base = (f"https://127.0.0.1:{fronts['tls'].port}/v1" if scheme == "https"
            else f"{sim.origin}/v1")
    creds = proxy.url.replace("://", f"://{USER}:{PASSWORD}@")
    wrong = proxy.url.replace("://", f"://{USER}:not-the-password@")
    tls = ca(certs) if scheme == "https" else {}
    good = await probe(make(base, proxy_url=creds, **tls))
    assert good.result is Result.SUCCESS, good.reason

    missing_config = make(base, proxy_url=proxy.url, **tls)
    missing = await probe(missing_config)
    assert missing.result is Result.CONNECT
    assert missing.reason == (f"proxy 127.0.0.1:{proxy.port} (from proxy_url) answered 407 "
                              "Proxy Authentication Required: it wants credentials, or refused "
                              "them")
    assert "(407 Proxy Authentication Required)" in hint(missing, missing_config)
    assert "the proxy URL (proxy_url) as `user:password@` before the host" in hint(
        missing, missing_config)

    refused = await probe(make(base, proxy_url=wrong, **tls))
    assert "not-the-password" not in refused.reason
    # (tinyproxy says 401, not 407, to wrong credentials: to CONNECT, and to a forwarded
    # request too, where it could pass for the server's own)
    assert refused.result is Result.CONNECT, refused.reason
    assert refused.reason == (f"proxy 127.0.0.1:{proxy.port} (from proxy_url) answered 401 "
                              "Unauthorized: it refused the credentials in the proxy URL")


async def test_credentials_from_the_environment_proxy(fronts, certs, proxies) -> None:
    creds = proxies["auth"].url.replace("://", f"://{USER}:{PASSWORD}@")
    result = await probe(make(f"https://127.0.0.1:{fronts['tls'].port}/v1",
                              env={"https_proxy": creds}, **ca(certs)))
    assert result.result is Result.SUCCESS, result.reason


async def test_a_proxy_that_refuses_connect(fronts, certs, proxies) -> None:
    proxy, port = proxies["strict"], fronts["tls"].port
    config = make(f"https://127.0.0.1:{port}/v1", proxy_url=proxy.url, **ca(certs))
    result = await probe(config)
    assert result.result is Result.CONNECT
    assert result.reason == (f"proxy 127.0.0.1:{proxy.port} (from proxy_url) refused CONNECT "
                             f"to 127.0.0.1:{port}: 403 Access violation")
    assert hint(result, config).startswith("the proxy refused to open a tunnel to 127.0.0.1: "
                                           "its rules allow other hosts or ports only")


async def test_a_proxy_that_cannot_reach_the_target(certs, proxies) -> None:
    port = free_port()
    config = make(f"https://127.0.0.1:{port}/v1", proxy_url=proxies["open"].url, **ca(certs))
    result = await probe(config)
    assert result.result is Result.CONNECT
    assert result.reason.endswith(f"could not reach 127.0.0.1:{port}: 500 Unable to connect")
    assert hint(result, config).startswith("the proxy could not reach 127.0.0.1")


async def test_a_proxy_that_is_not_there(certs) -> None:
    port = free_port()
    config = make("https://api.example/v1", env={"HTTPS_PROXY": f"http://127.0.0.1:{port}"})
    result = await probe(config)
    assert result.result is Result.CONNECT
    assert result.reason == (f"cannot connect to proxy 127.0.0.1:{port} (from HTTPS_PROXY): "
                             "connection refused")
    assert hint(result, config).startswith(f"nothing accepts connections at the proxy "
                                           f"http://127.0.0.1:{port} (HTTPS_PROXY)")


async def test_phases_behind_a_proxy_are_true(fronts, certs, proxies) -> None:
    """Relays hold the proxy's CONNECT answer back 300 ms and the server's first TLS bytes
    200 ms: exactly those phases grow, and the phases add up to the probe's wall time.

    Margins are 150 ms, under either delay, so a phase that went missing or landed in the wrong
    place fails, while a busy machine (the suite runs beside others on two cores) does not."""
    tunnel_delay, tls_delay, margin = 0.3, 0.2, 0.15
    to_proxy = await Relay(proxies["open"].port, delay=tunnel_delay).start()
    to_server = await Relay(fronts["tls"].port, delay=tls_delay).start()
    config = make(f"https://127.0.0.1:{to_server.port}/v1",
                  proxy_url=f"http://127.0.0.1:{to_proxy.port}", **ca(certs))
    try:
        async with Prober() as prober:
            started = time.perf_counter()
            result = await prober.probe(config.series[0])
            wall = time.perf_counter() - started
    finally:
        await to_proxy.close()
        await to_server.close()
    assert result.result is Result.SUCCESS, result.reason
    phases, t = result.timings.phases, result.timings
    shown = {phase.value: round(seconds, 4) for phase, seconds in phases.items()}
    # each delay lands in its own phase, and only there
    assert phases[Phase.CONNECT] < margin, shown
    assert tunnel_delay <= phases[Phase.PROXY_TUNNEL] < tunnel_delay + margin, shown
    assert tls_delay <= phases[Phase.TLS] < tls_delay + margin, shown
    assert t.duration is not None and t.ttft is not None
    # set-up + E2E is the wall time, less what comes before the connect and after the end
    set_up = phases[Phase.CONNECT] + phases[Phase.PROXY_TUNNEL] + phases[Phase.TLS]
    assert set_up + t.duration <= wall
    assert wall - (set_up + t.duration) < margin, (wall, set_up, t.duration)
    # after the request is written: wait, first token, generate, and the stream's last bytes
    after = phases[Phase.WAIT] + phases[Phase.FIRST_TOKEN] + phases[Phase.GENERATE]
    assert after <= t.duration and t.duration - after < margin / 2, (after, t.duration)
    assert t.ttft == pytest.approx(phases[Phase.WAIT] + phases[Phase.FIRST_TOKEN], abs=1e-9)
    assert t.ttft >= PROFILE.ttft  # TTFT starts at the request write, after the set-up


async def test_the_key_never_reaches_the_proxy_in_clear_over_https(sim, fronts, certs,
                                                                   proxies) -> None:
    """Over https only the CONNECT line and ciphertext pass the proxy: the key is neither in
    its log nor in any byte sent its way. Over http (the control) the proxy sees everything."""
    key = canary("proxy-")
    proxy = proxies["open"]
    relay = await Relay(proxy.port).start()
    via = f"http://127.0.0.1:{relay.port}"
    target = {"api_key": key, "query": {"api-key": key}, "proxy_url": via}
    try:
        https = await probe(make(f"https://127.0.0.1:{fronts['tls'].port}/v1",
                                 **target, **ca(certs)))
        assert https.result is Result.SUCCESS, https.reason
        assert key.encode() not in relay.sent and key not in proxy.log()
        assert b"CONNECT 127.0.0.1:" in relay.sent
        http = await probe(make(f"{sim.origin}/v1", **target))
        assert http.result is Result.SUCCESS, http.reason
        assert key.encode() in relay.sent and key in proxy.log()  # the capture works
    finally:
        await relay.close()


# ---------------------------------------------------------------------------------------------
# TLS


async def test_a_private_ca_direct_and_through_a_proxy(fronts, certs, proxies) -> None:
    base = f"https://127.0.0.1:{fronts['tls'].port}/v1"
    for extra in ({}, {"proxy_url": proxies["open"].url}):
        result = await probe(make(base, **extra, **ca(certs)))
        assert result.result is Result.SUCCESS, (extra, result.reason)
        assert result.timings.phases[Phase.TLS] > 0


async def test_an_unknown_ca(fronts) -> None:
    config = make(f"https://127.0.0.1:{fronts['tls'].port}/v1")
    result = await probe(config)
    assert result.result is Result.TLS, result.reason
    assert result.reason == ("TLS failed: the server's certificate was not accepted: unable to "
                             "get local issuer certificate")
    assert "Set `tls.ca_file` to that CA's certificate" in hint(result, config)
    # the lab escape hatch, either spelling
    for insecure in ({"tls_verify": False}, {"tls": {"insecure_skip_verify": True}}):
        assert (await probe(make(config.targets[0].base_url, **insecure))).success


async def test_server_name_sets_sni_and_the_name_verified(fronts, certs) -> None:
    front = fronts["tls"]
    base = f"https://localhost:{front.port}/v1"
    wrong = make(base, **ca(certs, server_name="other.internal"))
    result = await probe(wrong)
    assert result.result is Result.TLS, result.reason
    assert result.reason.endswith("Hostname mismatch, certificate is not valid for "
                                  "'other.internal'.")
    assert "set `tls.server_name` to that name" in hint(result, wrong)
    right = await probe(make(base, **ca(certs, server_name="sim.internal")))
    assert right.result is Result.SUCCESS, right.reason
    assert front.server_names[-1] == "sim.internal"  # what the server saw in the handshake


async def test_an_expired_server_certificate(fronts, certs) -> None:
    config = make(f"https://127.0.0.1:{fronts['expired'].port}/v1", **ca(certs))
    result = await probe(config)
    assert result.result is Result.TLS, result.reason
    assert result.reason.endswith("certificate has expired")
    assert hint(result, config).startswith("the server's certificate has expired")


@pytest.mark.parametrize("front", ["mtls", "mtls12"])
async def test_mutual_tls(front, fronts, certs, proxies) -> None:
    base = f"https://127.0.0.1:{fronts[front].port}/v1"
    client = {"cert_file": str(certs.client_cert), "key_file": str(certs.client_key)}
    for extra in ({}, {"proxy_url": proxies["open"].url}):
        result = await probe(make(base, **extra, **ca(certs, **client)))
        assert result.result is Result.SUCCESS, (extra, result.reason)

    without = make(base, **ca(certs))
    missing = await probe(without)
    assert missing.result is Result.TLS, missing.reason
    if front == "mtls":  # TLS 1.3 names the problem
        assert missing.reason == ("TLS failed: the server requires a client certificate "
                                  "(tlsv13_alert_certificate_required)")
        assert hint(missing, without).startswith("the server requires a client certificate "
                                                 "(mTLS): set `tls.cert_file` and "
                                                 "`tls.key_file`")
    else:  # TLS 1.2 only refuses the handshake
        assert "refused the handshake (it may require a client certificate" in missing.reason
        assert "(`tls.cert_file`, `tls.key_file`)" in hint(missing, without)

    stranger_config = make(base, **ca(certs, cert_file=str(certs.stranger_cert),
                                      key_file=str(certs.stranger_key)))
    stranger = await probe(stranger_config)
    assert stranger.result is Result.TLS, stranger.reason
    assert stranger.reason == ("TLS failed: the server does not trust our client certificate "
                               "(unknown CA) (tlsv1_alert_unknown_ca)")
    assert hint(stranger, stranger_config).startswith(
        f"the server did not accept our client certificate ({certs.stranger_cert})")


async def test_a_plain_port_named_https() -> None:
    async def answer_in_clear(reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer_in_clear, "127.0.0.1", 0)
    try:
        config = make(f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
        result = await probe(config)
    finally:
        server.close()
    assert result.result is Result.TLS, result.reason
    assert result.reason == ("TLS failed: the other end does not speak TLS (an http:// port?) "
                             "(wrong_version_number)")
    assert "plain-HTTP port" in hint(result, config)

"""--web.config.file: every exporter-toolkit key, real TLS (versions, ciphers, client
certificates, rotation), bcrypt basic auth in its own pool, rate limit and headers."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import aiohttp
import bcrypt
import pytest
import yaml

from exporter.config import ConfigError
from exporter.serve.webconfig import BcryptPool, LiveWebConfig, load_web_config
from tests.conftest import make_config
from tests.e2e_support import shipped_config as make_shipped_config
from tests.e2e_support import wait_for
from tests.security.port_support import basic, serve


def make_cert(tmp_path):
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def get(url: str, context: ssl.SSLContext, auth: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.e2e
def test_tls_and_basic_auth_on_every_endpoint(tmp_path) -> None:
    cert, _key = make_cert(tmp_path)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
        "basic_auth_users": {"prometheus": hashed},
        "http_server_config": {"headers": {"X-Frame-Options": "deny"}}}))
    config, _ = make_shipped_config(tmp_path, models={"a": {"ttft": "10ms", "tpot": "1ms",
                                                            "output_tokens": 4}})
    daemon = start_daemon_tls(config, tmp_path, web)
    context = ssl.create_default_context(cafile=str(cert))
    try:
        base = daemon.url
        for path in ("/metrics", "/", "/-/healthy", "/-/ready", "/api/v1/results", "/config"):
            assert get(base + path, context) == 401
            assert get(base + path, context, ("prometheus", "wrong")) == 401
            assert get(base + path, context, ("nobody", "s3cret")) == 401
            assert get(base + path, context, ("prometheus", "s3cret")) == 200
        # Plain HTTP gets no answer from the TLS server.
        with pytest.raises((urllib.error.URLError, http.client.HTTPException, OSError)):
            urllib.request.urlopen(base.replace("https", "http") + "/-/healthy", timeout=5)
        with pytest.raises(urllib.error.URLError):  # an untrusted client rejects the cert
            urllib.request.urlopen(base + "/-/healthy", timeout=5,
                                   context=ssl.create_default_context())
    finally:
        assert daemon.stop() == 0


def start_daemon_tls(config, tmp_path, web):
    import os
    import sys

    from tests.conftest import free_port
    from tests.e2e_support import ROOT, Daemon

    port = free_port()
    log = tmp_path / "tls-daemon.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--config.file", str(config),
             "--web.listen-address", f"127.0.0.1:{port}", "--web.config.file", str(web)],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=dict(os.environ))
    daemon = Daemon(proc, log, url=f"https://127.0.0.1:{port}")
    insecure = ssl._create_unverified_context()
    wait_for(lambda: get(daemon.url + "/-/healthy", insecure) == 401, 20, "the TLS daemon")
    return daemon


@pytest.mark.parametrize(("content", "message"), [
    ({"basic_auth_users": {"a": "plain"}}, "basic_auth_users.a: must be a bcrypt hash"),
    ({"tls_server_config": {"cert_file": "x"}},
     "tls_server_config.key_file: missing one of key or key_file"),
    ({"tls_config": {}}, "tls_config: unknown key"),
])
def test_invalid_web_config(tmp_path, content, message) -> None:
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(content))
    with pytest.raises(ConfigError, match=message):
        load_web_config(path)


# -- the whole exporter-toolkit format, on a real app and socket -------------------------------

def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(tmp_path):
    """A test CA (EC P-256: fast to make)."""
    key, cert = tmp_path / "ca.key", tmp_path / "ca.crt"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=test CA", "-keyout", str(key), "-out",
            str(cert))
    return cert, key


def make_leaf(tmp_path, ca, name: str, san: str):
    """A certificate for `san` signed by `ca`; returns (cert, key)."""
    key, csr, cert = (tmp_path / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-subj", f"/CN={name}", "-addext", f"subjectAltName={san}",
            "-keyout", str(key), "-out", str(csr))
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
            "-CAcreateserial", "-days", "1", "-copy_extensions", "copy", "-out", str(cert))
    return cert, key


@pytest.fixture
def pki(tmp_path):
    """A CA, a server certificate for 127.0.0.1 and two client certificates."""
    ca = make_ca(tmp_path)
    return {"ca": ca, "server": make_leaf(tmp_path, ca, "server", "IP:127.0.0.1"),
            "good": make_leaf(tmp_path, ca, "good", "DNS:prometheus.example"),
            "other": make_leaf(tmp_path, ca, "other", "DNS:other.example")}


def write_web(tmp_path, content: dict):
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(content))
    return path


def client_context(pki, client: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"][0]))
    if client is not None:
        context.load_cert_chain(*map(str, pki[client]))
    return context


async def https_get(port: int, context: ssl.SSLContext, path: str = "/-/healthy",
                    headers: dict[str, str] | None = None) -> tuple[int, dict, ssl.SSLObject]:
    """One request on a fresh TLS connection; (status, headers, the TLS object)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
                     .encode())
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        tls = writer.get_extra_info("ssl_object")
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    status_line, *lines = head.strip().split("\r\n")
    return int(status_line.split()[1]), dict(line.split(": ", 1) for line in lines), tls


def test_every_documented_key_is_accepted(tmp_path, pki) -> None:
    cert, key = pki["server"]
    path = write_web(tmp_path, {
        "tls_server_config": {
            "cert_file": str(cert), "key_file": str(key),
            "client_auth_type": "RequireAndVerifyClientCert",
            "client_ca_file": str(pki["ca"][0]),
            "client_allowed_sans": ["prometheus.example"],
            "min_version": "TLS12", "max_version": "TLS13",
            "cipher_suites": ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                              "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256"],
            "prefer_server_cipher_suites": False, "curve_preferences": ["CurveP256"]},
        "http_server_config": {"http2": True, "headers": {
            "X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'self'", "X-XSS-Protection": "1",
            "Strict-Transport-Security": "max-age=31536000"}},
        "basic_auth_users": {"alice": bcrypt.hashpw(b"x", bcrypt.gensalt(4)).decode()},
        "rate_limit": {"interval": "1s", "burst": 20}})
    config, _ = load_web_config(path)
    assert config.tls_server_config.client_allowed_sans == ("prometheus.example",)
    # Inline PEM instead of files.
    inline = write_web(tmp_path, {"tls_server_config": {
        "cert": cert.read_text(), "key": key.read_text(), "client_ca": pki["ca"][0].read_text(),
        "client_auth_type": "VerifyClientCertIfGiven"}})
    assert load_web_config(inline)[0].tls_server_config.client_ca


@pytest.mark.parametrize(("content", "message"), [
    ({"http_server_config": {"headers": {"Server": "x"}}},
     "http_server_config.headers.Server: cannot be configured"),
    ({"http_server_config": {"headers": {"X-Frame-Options": "allow"}}},
     "http_server_config.headers.X-Frame-Options: must be one of deny, sameorigin"),
    ({"http_server_config": {"http3": True}}, "http_server_config.http3: unknown key"),
    ({"rate_limit": {"interval": "1s"}},
     "rate_limit.burst: must be at least 1 when rate_limit.interval is set"),
    ({"rate_limit": {"interval": "soon", "burst": 1}}, "rate_limit.interval: invalid duration"),
    ({"tls_server_config": {"cert_file": "a", "key_file": "b", "min_version": "TLS13",
                            "max_version": "TLS12"}},
     "tls_server_config.min_version: TLS13 is above max_version TLS12"),
    ({"tls_server_config": {"cert_file": "a", "key_file": "b", "max_version": "SSL3"}},
     "tls_server_config.max_version: Input should be 'TLS10'"),
    ({"tls_server_config": {"cert_file": "a", "key_file": "b",
                            "cipher_suites": ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "RC4"]}},
     r"tls_server_config.cipher_suites\[1\]: unknown cipher suite 'RC4'"),
    ({"tls_server_config": {"cert_file": "a", "key_file": "b", "curve_preferences": ["P999"]}},
     r"tls_server_config.curve_preferences\[0\]: unknown curve 'P999'"),
    ({"tls_server_config": {"cert_file": "a", "key_file": "b", "client_ca_file": "ca"}},
     "tls_server_config.client_auth_type: a client CA is configured"),
    ({"tls_server_config": {"cert_file": "a", "key_file": "b",
                            "client_auth_type": "RequireAndVerifyClientCert"}},
     "tls_server_config.client_ca_file: RequireAndVerifyClientCert needs client_ca_file"),
    ({"tls_server_config": {"cert_file": "a", "key_file": "b", "client_ca_file": "ca",
                            "client_auth_type": "VerifyClientCertIfGiven",
                            "client_allowed_sans": ["x"]}},
     "tls_server_config.client_allowed_sans: needs client_auth_type RequireAnyClientCert"),
    ({"tls_server_config": {"cert_file": "a", "key_file": "b", "client_auth_type": "Maybe"}},
     "tls_server_config.client_auth_type: Input should be"),
    ({"tls_server_config": {"cert": "x", "cert_file": "a", "key_file": "b"}},
     "tls_server_config.cert_file: give cert or cert_file, not both"),
    ({"tls_server_config": {"cert_file": "missing.crt", "key_file": "missing.key"}},
     "tls_server_config.cert_file: cannot read missing.crt: No such file"),
])
def test_invalid_web_config_names_the_key(tmp_path, content, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_web_config(write_web(tmp_path, content))


def test_unreadable_or_hostile_files_are_located_errors(tmp_path) -> None:
    path = tmp_path / "web.yml"
    path.write_bytes(b"basic_auth_users: {a: \xff}\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_web_config(path)
    path.write_text("a: [" * 5000)
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_web_config(path)
    path.write_text("- not a mapping\n")
    with pytest.raises(ConfigError, match="invalid web config"):
        load_web_config(path)


async def test_tls_versions_and_cipher_suites_apply(tmp_path, pki, scripted_server) -> None:
    cert, key = pki["server"]
    path = write_web(tmp_path, {"tls_server_config": {
        "cert_file": str(cert), "key_file": str(key), "max_version": "TLS12",
        "cipher_suites": ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"]}})
    async with serve(make_config(), web_config=LiveWebConfig(path), schedule=False) as app:
        status, _, tls = await https_get(app.port, client_context(pki))
        assert status == 200
        assert tls.version() == "TLSv1.2"
        assert tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
        assert tls.selected_alpn_protocol() in (None, "http/1.1")


async def test_client_certificates_and_allowed_sans(tmp_path, pki) -> None:
    cert, key = pki["server"]
    path = write_web(tmp_path, {"tls_server_config": {
        "cert_file": str(cert), "key_file": str(key), "client_ca_file": str(pki["ca"][0]),
        "client_auth_type": "RequireAndVerifyClientCert",
        "client_allowed_sans": ["prometheus.example"]}})
    async with serve(make_config(), web_config=LiveWebConfig(path), schedule=False) as app:
        assert (await https_get(app.port, client_context(pki, "good")))[0] == 200
        assert (await https_get(app.port, client_context(pki, "other")))[0] == 403
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            await https_get(app.port, client_context(pki))  # no certificate at all


async def test_certificates_rotate_without_restart(tmp_path, pki) -> None:
    cert, key = tmp_path / "live.crt", tmp_path / "live.key"
    cert.write_bytes(pki["server"][0].read_bytes())
    key.write_bytes(pki["server"][1].read_bytes())
    path = write_web(tmp_path, {"tls_server_config": {"cert_file": "live.crt",
                                                      "key_file": "live.key"}})
    async with serve(make_config(), web_config=LiveWebConfig(path), schedule=False) as app:
        _, _, tls = await https_get(app.port, client_context(pki))
        first = tls.getpeercert()["serialNumber"]
        fresh = make_leaf(tmp_path, pki["ca"], "rotated", "IP:127.0.0.1")
        key.write_bytes(fresh[1].read_bytes())
        cert.write_bytes(fresh[0].read_bytes())

        async def serial() -> str:
            _, _, tls = await https_get(app.port, client_context(pki))
            return tls.getpeercert()["serialNumber"]

        seen = first
        for _ in range(25):  # the watcher polls every second
            seen = await serial()
            if seen != first:
                break
            await asyncio.sleep(0.2)
        assert seen == fresh_serial(fresh[0])


def fresh_serial(cert) -> str:
    out = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-serial"],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1].upper()


async def test_rate_limit_headers_and_refusals(tmp_path) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    path = write_web(tmp_path, {
        "basic_auth_users": {"prometheus": hashed},
        "http_server_config": {"headers": {"X-Frame-Options": "deny"}},
        "rate_limit": {"interval": "1h", "burst": 3}})
    async with serve(make_config(), web_config=LiveWebConfig(path), schedule=False) as app, \
            aiohttp.ClientSession() as session:
        async def get(path: str, **kw) -> aiohttp.ClientResponse:
            async with session.get(app.url + path, **kw) as response:
                await response.read()
                return response

        ok = await get("/-/healthy", headers=basic("prometheus", "s3cret"))
        missing = await get("/nowhere", headers=basic("prometheus", "s3cret"))
        refused = await get("/-/healthy", headers=basic("prometheus", "wrong"))
        assert (ok.status, missing.status, refused.status) == (200, 404, 401)
        for response in (ok, missing, refused):
            assert response.headers["X-Frame-Options"] == "deny"
        assert refused.headers["Connection"] == "close"  # nothing kept alive for a refusal
        limited = await get("/-/healthy", headers=basic("prometheus", "s3cret"))
        assert limited.status == 429 and limited.headers["X-Frame-Options"] == "deny"


async def test_bcrypt_has_its_own_bounded_pool(tmp_path) -> None:
    """Checks beyond the queue are refused at once (429), a repeated wrong password costs no
    bcrypt, an over-long one is a 401 (bcrypt refuses > 72 bytes), and the default executor
    stays free for rendering."""
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(12)).decode()  # ~0.3 s per check
    path = write_web(tmp_path, {"basic_auth_users": {"prometheus": hashed}})
    web_config = LiveWebConfig(path, pool=BcryptPool(workers=1, queue=2))
    async with serve(make_config(), web_config=web_config, schedule=False) as app, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def status(password: str) -> int:
            async with session.get(app.url + "/-/healthy",
                                   headers=basic("prometheus", password)) as response:
                return response.status

        started = time.perf_counter()
        statuses = await asyncio.gather(*(status(f"guess-{i}") for i in range(10)))
        assert sorted(statuses) == [401, 401] + [429] * 8
        assert time.perf_counter() - started < 5
        rendered = await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 0.5)
        assert rendered == "free"
        started = time.perf_counter()
        assert await status("guess-0") == 401  # remembered: no bcrypt this time
        assert time.perf_counter() - started < 0.2
        assert await status("x" * 100) == 401
        assert await status("s3cret") == 200


async def test_a_broken_rewrite_keeps_the_running_config(tmp_path) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    path = write_web(tmp_path, {"basic_auth_users": {"prometheus": hashed}})
    web_config = LiveWebConfig(path)
    path.write_text("basic_auth_users: [")
    assert await web_config.refresh() is False
    assert await web_config.refresh() is False  # unchanged since: not re-read, not re-logged
    new = bcrypt.hashpw(b"n3w", bcrypt.gensalt(4)).decode()
    write_web(tmp_path, {"basic_auth_users": {"prometheus": new}})
    assert await web_config.refresh() is True
    async with serve(make_config(), web_config=web_config, schedule=False) as app, \
            aiohttp.ClientSession() as session, session.get(
                app.url + "/-/healthy", headers=basic("prometheus", "n3w")) as response:
        assert response.status == 200

"""--web.config.file: real TLS and bcrypt basic auth on every endpoint of the daemon."""

from __future__ import annotations

import base64
import http.client
import ssl
import subprocess
import urllib.error
import urllib.request

import bcrypt
import pytest
import yaml

from exporter.config import ConfigError
from exporter.webconfig import load_web_config
from tests.e2e_support import shipped_config as make_shipped_config
from tests.e2e_support import wait_for


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
    ({"tls_server_config": {"cert_file": "x"}}, "tls_server_config.key_file: Field required"),
    ({"tls_config": {}}, "tls_config: unknown key"),
])
def test_invalid_web_config(tmp_path, content, message) -> None:
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(content))
    with pytest.raises(ConfigError, match=message):
        load_web_config(path)
